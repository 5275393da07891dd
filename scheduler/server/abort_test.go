package server_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/llmesh/llmesh/clock"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/server"
	"github.com/llmesh/llmesh/testkit/schedtest"
)

// abortGauge reads llmesh_preemption_abort_unhonoured{pool} from c.
func abortGauge(t *testing.T, c prometheus.Collector, pool string) (float64, bool) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "llmesh_preemption_abort_unhonoured" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "pool" && l.GetValue() == pool {
					return m.GetGauge().GetValue(), true
				}
			}
		}
	}
	return 0, false
}

// TestCollectorAbortUnhonoured drives a real Scheduler on a fake clock: a
// preempted batch lease is released, the engine's load reports keep
// counting it for 1.5s, and the exported gauge goes from 0 to 1; a third
// interactive request then waits instead of preempting.
func TestCollectorAbortUnhonoured(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	pre := schedtest.Policy(t, "preemptive")
	s, err := scheduler.New(scheduler.Config{
		Pools: []scheduler.PoolConfig{{Name: "gpu", MaxInflight: 2, Policy: pre,
			Preemption: scheduler.PreemptionConfig{MinLowerInflight: 1, MaxPerRequest: 3}}},
		Classes: []scheduler.ClassConfig{
			{Name: "interactive", Priority: 0, TTFT: 200 * time.Millisecond},
			{Name: "batch", Priority: 10, TTFT: 5 * time.Second, TPOT: 100 * time.Millisecond, Preemptible: true},
		},
		DefaultClass: "batch",
	}, clk)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	c := server.NewCollector(s.Stats)
	if v, ok := abortGauge(t, c, "gpu"); !ok || v != 0 {
		t.Fatalf("gauge %v (present %v), want 0", v, ok)
	}
	ctx := context.Background()
	var batch []scheduler.Lease
	for i := 0; i < 2; i++ {
		l, err := s.Admit(ctx, scheduler.Request{Class: "batch", MaxTokens: 100})
		if err != nil {
			t.Fatal(err)
		}
		batch = append(batch, l)
	}
	load := func(running int) {
		t.Helper()
		if err := s.SetEndpointLoad("gpu", "", scheduler.EndpointLoad{Running: running}); err != nil {
			t.Fatal(err)
		}
	}
	load(2)
	ch := make(chan schedtest.Admission, 2)
	schedtest.AdmitInto(ctx, s, "interactive", scheduler.Request{Class: "interactive", MaxTokens: 4}, ch)
	var victim scheduler.Lease
	select {
	case <-batch[0].Preempt():
		victim = batch[0]
	case <-batch[1].Preempt():
		victim = batch[1]
	case <-time.After(10 * time.Second):
		t.Fatal("no preemption")
	}
	victim.Release(scheduler.Preempted)
	r := <-ch
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	for i := 0; i < 3; i++ {
		clk.Advance(500 * time.Millisecond)
		load(3) // the engine still runs the victim
	}
	if v, _ := abortGauge(t, c, "gpu"); v != 1 {
		t.Fatalf("gauge %v after three reports over 1.5s, want 1", v)
	}
	before := s.Stats()[0].Preempted
	schedtest.AdmitInto(ctx, s, "second", scheduler.Request{Class: "interactive", MaxTokens: 4}, ch)
	// The arrival's step is done once it is queued.
	for s.Stats()[0].Queued["interactive"] != 1 {
		time.Sleep(time.Millisecond)
	}
	if got := s.Stats()[0].Preempted; got != before {
		t.Fatalf("preempted %d times after the mark, was %d", got, before)
	}
	r.Lease.Release(scheduler.Done)
	if r = <-ch; r.Err != nil {
		t.Fatal(r.Err)
	}
	r.Lease.Release(scheduler.Done)
	for _, l := range batch {
		l.Release(scheduler.Done)
	}
}
