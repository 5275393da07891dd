package policy_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/policy"
)

// TestEndpointConformance runs random events over a pool of three
// endpoints under every policy: arrivals (some with an affinity key),
// requeues, progress, releases (each twice), cancels, preemptions honoured,
// endpoint drains and recoveries, learned endpoint limits, time passing.
// After every step: no endpoint is over its limit after an admission,
// nothing is admitted to a drained endpoint, no victim is chosen on a
// drained endpoint while every other endpoint is full, the machine's per-endpoint counts match the model; after the
// drain nothing is left in flight anywhere, so every lease was released
// exactly once.
func TestEndpointConformance(t *testing.T) {
	for _, p := range policy.All() {
		t.Run(p.Name(), func(t *testing.T) {
			t.Parallel()
			endpointEvents(t, p, 100_000)
		})
	}
}

func endpointEvents(t *testing.T, p scheduler.Policy, n int) {
	names := []string{"e0:1", "e1:1", "e2:1"}
	static := map[string]int{"e0:1": 2, "e1:1": 3, "e2:1": 2}
	rails := scheduler.PreemptionConfig{MinLowerInflight: 2, MinRunTime: 5 * time.Millisecond, MaxPerRequest: 2}
	pc := scheduler.PoolConfig{MaxInflight: 6, MaxInflightTokens: 4000, Aging: 200 * time.Millisecond, Preemption: rails}
	for _, name := range names {
		pc.Endpoints = append(pc.Endpoints, scheduler.EndpointConfig{Name: name, MaxInflight: static[name]})
	}
	m := machine(t, p, pc)
	rng := rand.New(rand.NewPCG(7, uint64(len(p.Name()))))
	cls := classes()

	now := t0
	waiting, running := newSet(), newSet()
	onEp := map[scheduler.Ticket]string{}
	count := map[string]int{}
	limit := map[string]int{}
	drained := map[string]bool{}
	for k, v := range static {
		limit[k] = v
	}
	var requeue []scheduler.Request
	nextID := 0
	admittedTo := map[string]int{}
	stopping := func(ep string) int { // victims on ep not yet released
		n := 0
		for tk := range running.preemptedSet {
			if onEp[tk] == ep {
				n++
			}
		}
		return n
	}
	step := func() {
		d := m.Step(now)
		for _, tk := range d.Admitted {
			r := waiting.get(tk)
			if r == nil {
				t.Fatalf("ticket %d admitted while not waiting", tk)
			}
			ep, ok := m.EndpointOf(tk)
			switch {
			case !ok:
				t.Fatalf("admitted ticket %d has no endpoint", tk)
			case drained[ep]:
				t.Fatalf("ticket %d admitted to drained endpoint %s", tk, ep)
			case count[ep]+1 > limit[ep]:
				t.Fatalf("ticket %d admitted to %s with %d in flight, limit %d", tk, ep, count[ep], limit[ep])
			}
			count[ep]++
			admittedTo[ep]++
			onEp[tk] = ep
			waiting.del(tk)
			r.admittedAt = now
			running.add(tk, r)
		}
		for _, rj := range d.Rejected {
			waiting.del(rj.Ticket)
		}
		for _, tk := range d.Preempted {
			r := running.get(tk)
			if r == nil || r.preempted {
				t.Fatalf("ticket %d preempted while not running or twice", tk)
			}
			// A victim on a drained endpoint is of use only when the
			// pool's own bound is short and an endpoint has room.
			room := false
			for _, ep := range names {
				room = room || (!drained[ep] && count[ep]-stopping(ep) < limit[ep])
			}
			if drained[onEp[tk]] && !room {
				t.Fatalf("victim %d on drained endpoint %s with every endpoint full", tk, onEp[tk])
			}
			r.preempted = true
			running.preemptedSet[tk] = true
		}
		s := m.Stats()[0]
		if s.InFlight != running.len() || s.InFlight > pc.MaxInflight {
			t.Fatalf("machine has %d in flight, model %d, pool limit %d", s.InFlight, running.len(), pc.MaxInflight)
		}
		for _, e := range s.Endpoints {
			if e.InFlight != count[e.Name] || e.Drained != drained[e.Name] || e.Limit != limit[e.Name] {
				t.Fatalf("endpoint %+v, model in flight %d drained %v limit %d", e, count[e.Name], drained[e.Name], limit[e.Name])
			}
		}
	}
	release := func(tk scheduler.Ticket, o scheduler.Outcome) {
		m.Finish(now, tk, o)
		m.Finish(now, tk, o) // a second release is ignored
		count[onEp[tk]]--
		delete(onEp, tk)
		running.del(tk)
	}
	for i := 0; i < n; i++ {
		switch k := rng.IntN(100); {
		case k < 30:
			nextID++
			r := scheduler.Request{ID: fmt.Sprint(nextID), Class: cls[rng.IntN(len(cls))].Name,
				PromptTokens: rng.IntN(1000), MaxTokens: rng.IntN(1000), Arrival: now}
			if rng.IntN(3) == 0 {
				r.Affinity = fmt.Sprint("s", rng.IntN(5))
			}
			if tk, err := m.Arrive(now, r); err == nil {
				waiting.add(tk, &req{r: r})
			}
		case k < 35 && len(requeue) > 0:
			r := requeue[0]
			requeue = requeue[1:]
			r.Requeue = true
			if tk, err := m.Arrive(now, r); err == nil {
				waiting.add(tk, &req{r: r})
			}
		case k < 52 && running.len() > 0:
			tk, r := running.pick(rng)
			r.tokens += 1 + rng.IntN(20)
			m.Progress(now, tk, scheduler.Progress{FirstToken: true, Tokens: r.tokens})
		case k < 66 && running.len() > 0:
			tk, _ := running.pick(rng)
			release(tk, []scheduler.Outcome{scheduler.Done, scheduler.Failed, scheduler.Cancelled}[rng.IntN(3)])
		case k < 70 && waiting.len() > 0:
			tk, _ := waiting.pick(rng)
			m.Cancel(now, tk)
			waiting.del(tk)
		case k < 80:
			for _, tk := range running.preempted() {
				r := running.get(tk)
				if rng.IntN(2) == 0 {
					release(tk, scheduler.Preempted)
					requeue = append(requeue, r.r)
				}
			}
		case k < 83:
			ep := names[rng.IntN(len(names))]
			drained[ep] = !drained[ep]
			if err := m.SetEndpointHealth("p", ep, !drained[ep]); err != nil {
				t.Fatal(err)
			}
		case k < 85:
			ep := names[rng.IntN(len(names))]
			limit[ep] = 1 + rng.IntN(static[ep])
			if err := m.SetEndpointLimit("p", ep, limit[ep]); err != nil {
				t.Fatal(err)
			}
		default:
			now = now.Add(time.Duration(rng.IntN(20)) * time.Millisecond)
		}
		step()
	}
	for running.len() > 0 {
		tk, _ := running.pick(rng)
		release(tk, scheduler.Done)
	}
	for waiting.len() > 0 {
		tk, _ := waiting.pick(rng)
		m.Cancel(now, tk)
		waiting.del(tk)
	}
	step()
	s := m.Stats()[0]
	if s.InFlight != 0 || s.InFlightTokens != 0 || s.Preempting != 0 {
		t.Fatalf("leaked capacity after drain: %+v", s)
	}
	for _, e := range s.Endpoints {
		if e.InFlight != 0 || e.Preempting != 0 {
			t.Fatalf("endpoint %s leaked: %+v", e.Name, e)
		}
	}
	for _, name := range names {
		if admittedTo[name] == 0 {
			t.Fatalf("endpoint %s never got a request: %v", name, admittedTo)
		}
	}
	if scheduler.Preempts(p) && s.Preempted == 0 {
		t.Fatalf("the run preempted nothing: %+v", s.Counters)
	}
	t.Logf("%s: admitted by endpoint %v, %+v", p.Name(), admittedTo, s.Counters)
}
