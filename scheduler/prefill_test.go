package scheduler_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/llmesh/llmesh/clock"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/policy/priority"
	"github.com/llmesh/llmesh/testkit/schedtest"
	"github.com/llmesh/llmesh/testkit/wait"
)

func prefillPool(bound int) scheduler.PoolConfig {
	return scheduler.PoolConfig{MaxInflight: 10, MaxPrefillTokens: bound, Policy: priority.New()}
}

func TestPrefillBoundHoldsLowerPriority(t *testing.T) {
	m := newMachine(t, prefillPool(1000))
	b1 := arrive(t, m, at(0), scheduler.Request{Class: "batch", PromptTokens: 600, MaxTokens: 10})
	b2 := arrive(t, m, at(0), scheduler.Request{Class: "batch", PromptTokens: 600, MaxTokens: 10})
	arrive(t, m, at(0), scheduler.Request{Class: "batch", PromptTokens: 100, MaxTokens: 10})
	// b2 would take the outstanding prefill to 1200: it waits, and the
	// small request behind it waits too (the head blocks, as for capacity).
	if d := m.Step(at(0)); !cmp.Equal(d.Admitted, []scheduler.Ticket{b1}) {
		t.Fatalf("admitted %v, want only %d", d.Admitted, b1)
	}
	// The most urgent class is exempt, and its prefill counts.
	i := arrive(t, m, at(1), scheduler.Request{Class: "interactive", PromptTokens: 800, MaxTokens: 10})
	if d := m.Step(at(1)); !cmp.Equal(d.Admitted, []scheduler.Ticket{i}) {
		t.Fatalf("admitted %v, want the interactive %d", d.Admitted, i)
	}
	if got := m.Stats()[0].PrefillTokens; got != 1400 {
		t.Fatalf("prefill tokens %d, want 1400", got)
	}
	// b1's first token leaves 800 outstanding: 800+600 still exceeds 1000.
	m.Progress(at(2), b1, scheduler.Progress{FirstToken: true, Tokens: 1})
	if d := m.Step(at(2)); len(d.Admitted) != 0 {
		t.Fatalf("admitted %v with 800 prefill tokens outstanding", d.Admitted)
	}
	// The interactive request ends before its first token (cancelled): its
	// prefill no longer counts, and both batch requests fit (600+100).
	m.Finish(at(3), i, scheduler.Cancelled)
	if d := m.Step(at(3)); len(d.Admitted) != 2 || d.Admitted[0] != b2 {
		t.Fatalf("admitted %v, want %d and the small one", d.Admitted, b2)
	}
	if got := m.Stats()[0].PrefillTokens; got != 700 {
		t.Fatalf("prefill tokens %d, want 700", got)
	}
}

func TestPrefillBoundAdmitsOversizeAlone(t *testing.T) {
	m := newMachine(t, prefillPool(1000))
	big := arrive(t, m, at(0), scheduler.Request{Class: "batch", PromptTokens: 5000, MaxTokens: 10})
	small := arrive(t, m, at(0), scheduler.Request{Class: "batch", PromptTokens: 10, MaxTokens: 10})
	if d := m.Step(at(0)); !cmp.Equal(d.Admitted, []scheduler.Ticket{big}) {
		t.Fatalf("admitted %v, want the oversize prompt alone", d.Admitted)
	}
	m.Progress(at(5), big, scheduler.Progress{Tokens: 1}) // tokens imply the first token
	if d := m.Step(at(5)); !cmp.Equal(d.Admitted, []scheduler.Ticket{small}) {
		t.Fatalf("admitted %v, want %d", d.Admitted, small)
	}
	m.Finish(at(6), big, scheduler.Done)
	m.Finish(at(6), small, scheduler.Done)
	if s := m.Stats()[0]; s.PrefillTokens != 0 || s.InFlight != 0 {
		t.Fatalf("leaked: %+v", s)
	}
}

func TestPrefillBoundValidate(t *testing.T) {
	pc := prefillPool(-1)
	pc.Name = "p"
	cfg := scheduler.Config{Pools: []scheduler.PoolConfig{pc}, Classes: twoClasses()}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "pools[0].max_prefill_tokens") {
		t.Fatalf("Validate = %v, want an error naming pools[0].max_prefill_tokens", err)
	}
}

// The runtime steps the machine when a first token frees prefill budget;
// nothing else would wake the waiting request.
func TestSchedulerPrefillBoundReleasesOnFirstToken(t *testing.T) {
	s := newScheduler(t, prefillPool(1000), clock.NewFake(t0))
	ctx := context.Background()
	l1, err := s.Admit(ctx, scheduler.Request{Class: "batch", PromptTokens: 600, MaxTokens: 10})
	if err != nil {
		t.Fatal(err)
	}
	second := schedtest.Admit(ctx, s, scheduler.Request{Class: "batch", PromptTokens: 600, MaxTokens: 10})
	wait.Until(t, "second request queued", func() bool { return queued(s) == 1 })
	l1.Progress(scheduler.Progress{FirstToken: true})
	select {
	case r := <-second:
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		r.Lease.Release(scheduler.Done)
	case <-time.After(10 * time.Second):
		t.Fatal("the first token did not admit the held request")
	}
	l1.Release(scheduler.Done)
	if st := s.Stats()[0]; st.InFlight != 0 || st.PrefillTokens != 0 {
		t.Fatalf("leaked: %+v", st)
	}
}

func TestReserveUrgent(t *testing.T) {
	m := newMachine(t, scheduler.PoolConfig{MaxInflight: 4, ReserveUrgent: 2, Policy: priority.New()})
	var batch []scheduler.Ticket
	for i := 0; i < 3; i++ {
		batch = append(batch, arrive(t, m, at(0), scheduler.Request{Class: "batch", MaxTokens: 10}))
	}
	// Two of four slots are held for the interactive class.
	if d := m.Step(at(0)); !cmp.Equal(d.Admitted, batch[:2]) {
		t.Fatalf("admitted %v, want the first two batch requests", d.Admitted)
	}
	i1 := arrive(t, m, at(1), scheduler.Request{Class: "interactive", MaxTokens: 10})
	i2 := arrive(t, m, at(1), scheduler.Request{Class: "interactive", MaxTokens: 10})
	if d := m.Step(at(1)); !cmp.Equal(d.Admitted, []scheduler.Ticket{i1, i2}) {
		t.Fatalf("admitted %v, want both interactive requests in the reserve", d.Admitted)
	}
	// An interactive request leaving frees a slot, but three are in
	// flight: the batch request still waits (limit 4 − reserve 2).
	m.Finish(at(2), i1, scheduler.Done)
	if d := m.Step(at(2)); len(d.Admitted) != 0 {
		t.Fatalf("admitted %v into the reserve", d.Admitted)
	}
	m.Finish(at(3), batch[0], scheduler.Done)
	m.Finish(at(3), i2, scheduler.Done)
	if d := m.Step(at(3)); !cmp.Equal(d.Admitted, batch[2:]) {
		t.Fatalf("admitted %v, want %d", d.Admitted, batch[2])
	}
	// A limit learned from the engine at or below the reserve still
	// leaves other classes one slot.
	if err := m.SetLimit("p", 1); err != nil {
		t.Fatal(err)
	}
	m.Finish(at(4), batch[1], scheduler.Done)
	m.Finish(at(4), batch[2], scheduler.Done)
	b := arrive(t, m, at(4), scheduler.Request{Class: "batch", MaxTokens: 10})
	if d := m.Step(at(4)); !cmp.Equal(d.Admitted, []scheduler.Ticket{b}) {
		t.Fatalf("admitted %v at limit 1, want the batch request", d.Admitted)
	}
}

func TestReserveUrgentValidate(t *testing.T) {
	cfg := scheduler.Config{
		Pools:   []scheduler.PoolConfig{{Name: "p", MaxInflight: 4, ReserveUrgent: -1, Policy: priority.New()}},
		Classes: twoClasses(),
	}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "pools[0].reserve_urgent") {
		t.Fatalf("Validate = %v, want an error naming pools[0].reserve_urgent", err)
	}
}
