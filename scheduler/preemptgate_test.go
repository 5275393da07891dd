package scheduler

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// prioPolicy is the priority order (effective priority, then arrival
// sequence) with a plain preemption: victims of a preemptible, strictly
// less urgent class, just enough of them in victim order, whatever they
// cost. Tests inside the package cannot import a registered policy (its
// package imports this one); the mechanism they test works for any
// Preemptor.
type prioPolicy struct{}

var _ Preemptor = prioPolicy{}

func (prioPolicy) Name() string { return "prio" }
func (prioPolicy) Less(a, b *Entry) bool {
	if a.EffectivePriority != b.EffectivePriority {
		return a.EffectivePriority < b.EffectivePriority
	}
	return a.Seq < b.Seq
}
func (prioPolicy) Victim(c *ClassConfig, above int) bool { return c.Preemptible && c.Priority > above }
func (prioPolicy) Order(a, b *Candidate) int {
	switch {
	case a.Tokens() != b.Tokens():
		return a.Tokens() - b.Tokens()
	case !a.Admitted().Equal(b.Admitted()):
		return b.Admitted().Compare(a.Admitted())
	}
	return int(int64(b.Ticket()) - int64(a.Ticket()))
}
func (p prioPolicy) Choose(r *Rescue, cands []Candidate) (int, bool) {
	slices.SortFunc(cands, func(a, b Candidate) int { return p.Order(&a, &b) })
	most := min(r.Allowed, len(cands))
	if r.Probe {
		most = min(most, 1)
	}
	n, s, t := 0, r.Slots, r.Tokens
	for n < most && !r.Covered(s, t) {
		s, t = s+1, t+cands[n].Cost()
		n++
	}
	return n, false
}

// stepUngated is Step without the preemptCanAct guard: the walk runs at
// every step, as before the guard.
func stepUngated(m *Machine, now time.Time) Decisions { return m.step(now, false) }

// fleetConfig is examples/mesh-fleet.yaml's shape, scaled by eps
// endpoints of per slots each.
func fleetConfig(eps, per int, minRun time.Duration) Config {
	pc := PoolConfig{Name: "gpu", MaxInflight: eps * per, Policy: prioPolicy{}, MaxPrefillTokens: 8192 * eps,
		Preemption: PreemptionConfig{MinLowerInflight: 4, MinRunTime: minRun, MaxPerRequest: 1}}
	for i := range eps {
		pc.Endpoints = append(pc.Endpoints, EndpointConfig{Name: fmt.Sprintf("10.0.1.%d:8000", i+1), MaxInflight: per})
	}
	return Config{Pools: []PoolConfig{pc}, Classes: []ClassConfig{
		{Name: "premium", Priority: 0, TTFT: 300 * time.Millisecond, TPOT: 40 * time.Millisecond, MaxWait: 5 * time.Second},
		{Name: "standard", Priority: 5, TTFT: time.Second, TPOT: 80 * time.Millisecond, MaxWait: 30 * time.Second},
		{Name: "bulk", Priority: 20, Preemptible: true, MaxQueue: 10000},
	}, DefaultClass: "standard"}
}

// BenchmarkStepBacklog is one event of the shared service under a backlog
// (examples/mesh-fleet.yaml's pool, 512 slots full of young requests,
// 2,000 waiting): a finish, an arrival and their steps, gated (Step) and
// ungated (the walk at every step).
func BenchmarkStepBacklog(b *testing.B) {
	for _, tc := range []struct {
		name string
		step func(*Machine, time.Time) Decisions
	}{{"gated", (*Machine).Step}, {"ungated", stepUngated}} {
		b.Run(tc.name, func(b *testing.B) {
			m, err := NewMachine(fleetConfig(8, 64, 200*time.Millisecond))
			if err != nil {
				b.Fatal(err)
			}
			now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			classes := []string{"premium", "standard", "bulk"}
			rng := rand.New(rand.NewPCG(1, 2))
			arrive := func() {
				req := Request{Class: classes[rng.IntN(3)], PromptTokens: 64 + rng.IntN(1985), MaxTokens: 16 + rng.IntN(497)}
				if _, err := m.Arrive(now, req); err != nil {
					b.Fatal(err)
				}
			}
			var running []Ticket
			for range 512 + 2000 {
				arrive()
			}
			for len(running) < 512 {
				d := tc.step(m, now)
				for _, t := range d.Admitted {
					m.Progress(now, t, Progress{FirstToken: true, Tokens: 1})
				}
				running = append(running, d.Admitted...)
			}
			act := func(d Decisions) {
				for _, t := range d.Admitted {
					m.Progress(now, t, Progress{FirstToken: true, Tokens: 1})
				}
				running = append(running, d.Admitted...)
				for _, v := range d.Preempted {
					m.Finish(now, v, Preempted)
					running = slices.DeleteFunc(running, func(x Ticket) bool { return x == v })
				}
			}
			b.ResetTimer()
			for range b.N {
				now = now.Add(25 * time.Microsecond)
				m.Finish(now, running[0], Done)
				running = running[1:]
				act(tc.step(m, now))
				arrive()
				act(tc.step(m, now))
			}
		})
	}
}

// TestVictimQueueBounded: a long-running candidate victim at the front
// does not let the queue keep every later admission.
func TestVictimQueueBounded(t *testing.T) {
	m, err := NewMachine(fleetConfig(1, 8, 200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var running []Ticket
	for range 100_000 {
		if _, err := m.Arrive(now, Request{Class: "bulk", MaxTokens: 10}); err != nil {
			t.Fatal(err)
		}
		running = append(running, m.Step(now).Admitted...)
		if len(running) == 8 { // keep the first one, finish the others
			m.Finish(now, running[7], Done)
			running = running[:7]
		}
		now = now.Add(time.Microsecond)
	}
	p := m.pools[0]
	if got := cap(p.victims.items); got > 256 {
		t.Errorf("victim queue capacity %d after 100,000 admissions with 8 slots, want at most 256", got)
	}
	if at, ok := p.victims.firstEligible(p); !ok || !at.Equal(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("first eligible = %v, %v; want the first admission", at, ok)
	}
}

// TestVictimQueueClockBack: after a clock stepped back, the oldest
// candidate is found even when it is not at the front.
func TestVictimQueueClockBack(t *testing.T) {
	m, err := NewMachine(fleetConfig(1, 8, 200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, ms := range []int{10, 5, 7} {
		now := t0.Add(time.Duration(ms) * time.Millisecond)
		if _, err := m.Arrive(now, Request{Class: "bulk"}); err != nil {
			t.Fatal(err)
		}
		if d := m.Step(now); len(d.Admitted) != 1 {
			t.Fatalf("at %d ms: %+v", ms, d)
		}
	}
	p := m.pools[0]
	if at, ok := p.victims.firstEligible(p); !ok || !at.Equal(t0.Add(5*time.Millisecond)) {
		t.Errorf("first eligible = %v, %v; want the admission at 5 ms", at, ok)
	}
}

// TestPreemptGateSkipsALeastUrgentBacklog: with only requests of the least
// urgent class waiting, no running request can be their victim, so the
// walk is skipped however full the pool and however long they waited; an
// arrival of a more urgent class opens it again.
func TestPreemptGateSkipsALeastUrgentBacklog(t *testing.T) {
	m, err := NewMachine(fleetConfig(2, 4, 0))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for range 8 + 100 {
		if _, err := m.Arrive(now, Request{Class: "bulk", PromptTokens: 100, MaxTokens: 100}); err != nil {
			t.Fatal(err)
		}
	}
	d := m.Step(now)
	if len(d.Admitted) != 8 {
		t.Fatalf("admitted %d, want the pool's 8", len(d.Admitted))
	}
	p := m.pools[0]
	now = now.Add(time.Hour) // every waiting request long past any objective
	var wake Decisions
	if m.preemptCanAct(now, p, &wake) {
		t.Fatal("the walk runs with only bulk requests waiting behind bulk victims")
	}
	if !wake.Wake.IsZero() {
		t.Fatalf("wake-up %v asked for a walk that can never preempt", wake.Wake)
	}
	if _, err := m.Arrive(now, Request{Class: "standard", PromptTokens: 100, MaxTokens: 100}); err != nil {
		t.Fatal(err)
	}
	if !m.preemptCanAct(now, p, &wake) {
		t.Fatal("the walk is skipped with a standard request waiting behind bulk victims")
	}
}
