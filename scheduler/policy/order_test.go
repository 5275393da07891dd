package policy_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/policy"
)

// TestAdmissionOrder queues the same five requests under every policy on a
// pool of one and checks the order they are admitted in.
//
//	name  class        arrival  deadline (arrival + TTFT objective)
//	b1    batch        0ms      500ms
//	s1    standard     10ms     310ms
//	i1    interactive  20ms     120ms
//	b2    batch        30ms     530ms
//	s2    standard     300ms    600ms
func TestAdmissionOrder(t *testing.T) {
	want := map[string][]string{
		"fifo":       {"b1", "s1", "i1", "b2", "s2"},
		"priority":   {"i1", "s1", "s2", "b1", "b2"},
		"preemptive": {"i1", "s1", "s2", "b1", "b2"},
		"edf":        {"i1", "s1", "b1", "b2", "s2"},
	}
	for _, p := range policy.All() {
		t.Run(p.Name(), func(t *testing.T) {
			w, ok := want[p.Name()]
			if !ok {
				t.Fatalf("add the expected order of policy %q to this table", p.Name())
			}
			m := machine(t, p, scheduler.PoolConfig{MaxInflight: 1})
			now := t0
			hold, err := m.Arrive(now, scheduler.Request{Class: "interactive"})
			if err != nil {
				t.Fatal(err)
			}
			m.Step(now)
			names := map[scheduler.Ticket]string{}
			for _, r := range []struct {
				name, class string
				ms          int
			}{
				{"b1", "batch", 0}, {"s1", "standard", 10}, {"i1", "interactive", 20}, {"b2", "batch", 30}, {"s2", "standard", 300},
			} {
				tk, err := m.Arrive(t0.Add(time.Duration(r.ms)*time.Millisecond), scheduler.Request{Class: r.class})
				if err != nil {
					t.Fatal(err)
				}
				names[tk] = r.name
			}
			now = t0.Add(310 * time.Millisecond)
			var got []string
			running := hold
			for len(got) < len(w) {
				m.Finish(now, running, scheduler.Done)
				d := m.Step(now)
				if len(d.Admitted) != 1 {
					t.Fatalf("admitted %v, want one", d.Admitted)
				}
				running = d.Admitted[0]
				got = append(got, names[running])
				now = now.Add(time.Millisecond)
			}
			if diff := cmp.Diff(w, got); diff != "" {
				t.Errorf("order (-want +got):\n%s", diff)
			}
		})
	}
}
