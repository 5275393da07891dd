package scheduler_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/llmesh/llmesh/clock"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/policy/preemptive"
	"github.com/llmesh/llmesh/scheduler/server"
	"github.com/llmesh/llmesh/testkit/proctest"
	"github.com/llmesh/llmesh/testkit/wait"
)

// unhonouredGauge reads llmesh_preemption_abort_unhonoured{pool} from c.
func unhonouredGauge(t *testing.T, c prometheus.Collector, pool string) float64 {
	t.Helper()
	return poolGauge(t, c, "llmesh_preemption_abort_unhonoured", pool)
}

// poolGauge reads the gauge name{pool} from c.
func poolGauge(t *testing.T, c prometheus.Collector, name, pool string) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "pool" && l.GetValue() == pool {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	t.Fatalf("no %s{pool=%q}", name, pool)
	return 0
}

// TestAbortProbeRecovers drives a real Scheduler on a fake clock through a
// mark and its recovery: the engine keeps a victim (gauge 1, a warning
// naming the next probe), an urgent request then waits instead of
// preempting, and once AbortProbe has passed on the clock the scheduler
// preempts one probe victim by itself (the wake-up of its step). The
// engine stops that one: the gauge is back at 0, an info line says
// preemption is back on.
func TestAbortProbeRecovers(t *testing.T) {
	var logs proctest.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logs, nil)))
	t.Cleanup(func() { slog.SetDefault(prev) })

	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	s, err := scheduler.New(scheduler.Config{
		Pools: []scheduler.PoolConfig{{Name: "gpu", MaxInflight: 2, Policy: preemptive.New(),
			Preemption: scheduler.PreemptionConfig{MinLowerInflight: 1, MaxPerRequest: 3, AbortProbe: time.Minute}}},
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
	ctx := context.Background()
	admit := func(class string) scheduler.Lease {
		t.Helper()
		l, err := s.Admit(ctx, scheduler.Request{Class: class, MaxTokens: 100})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	load := func(running int) {
		t.Helper()
		if err := s.SetEndpointLoad("gpu", "", scheduler.EndpointLoad{Running: running}); err != nil {
			t.Fatal(err)
		}
	}
	// urgent admits an interactive request in the background; the lease
	// comes back on the channel.
	urgent := func() chan scheduler.Lease {
		ch := make(chan scheduler.Lease, 1)
		go func() {
			l, err := s.Admit(ctx, scheduler.Request{Class: "interactive", MaxTokens: 4})
			if err != nil {
				t.Error(err)
			}
			ch <- l
		}()
		return ch
	}
	// preempted waits for one of ls to be preempted and releases it.
	preempted := func(what string, ls ...scheduler.Lease) int {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for {
			for i, l := range ls {
				select {
				case <-l.Preempt():
					l.Release(scheduler.Preempted)
					return i
				default:
				}
			}
			select {
			case <-deadline:
				t.Fatalf("%s: no preemption", what)
			case <-time.After(time.Millisecond):
			}
		}
	}

	batch := []scheduler.Lease{admit("batch"), admit("batch")}
	load(2)
	ch := urgent()
	i := preempted("first preemption", batch...)
	first := <-ch
	for n := 0; n < 3; n++ {
		clk.Advance(500 * time.Millisecond)
		load(3) // the engine still runs the victim
	}
	if v := unhonouredGauge(t, c, "gpu"); v != 1 {
		t.Fatalf("gauge %v after the engine kept the victim, want 1", v)
	}
	if !strings.Contains(logs.String(), "abort not honoured") || !strings.Contains(logs.String(), "next_probe_in=1m0s") {
		t.Fatalf("no warning naming the next probe; logs:\n%s", logs.String())
	}
	// The victim ran to its end on the engine; the urgent request is done
	// and a batch request takes its slot.
	first.Release(scheduler.Done)
	batch[i] = admit("batch")
	load(2)
	ch = urgent()
	wait.Until(t, "the interactive request queued", func() bool { return s.Stats()[0].Queued["interactive"] == 1 })
	before := s.Stats()[0].Preempted
	clk.Advance(30 * time.Second)
	if got := s.Stats()[0].Preempted; got != before {
		t.Fatalf("preempted %d times 30s after the mark, was %d", got, before)
	}
	clk.Advance(30 * time.Second)
	preempted("probe", batch...)
	second := <-ch
	for n := 0; n < 3; n++ {
		clk.Advance(500 * time.Millisecond)
		load(2) // the engine stopped the probe's victim
	}
	if v := unhonouredGauge(t, c, "gpu"); v != 0 {
		t.Fatalf("gauge %v after an honoured probe, want 0", v)
	}
	if !strings.Contains(logs.String(), "level=INFO msg=\"scheduler: probe preemption was honoured by the engine; preemption is back on for the pool\"") {
		t.Fatalf("no info line for the lifted mark; logs:\n%s", logs.String())
	}
	second.Release(scheduler.Done)
	for _, l := range batch {
		l.Release(scheduler.Done)
	}
}
