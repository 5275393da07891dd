package policy_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/llmesh/llmesh/scheduler"
)

// randomEvents drives n random events (arrive, requeue, progress, finish,
// upstream error, cancel while waiting or running, preemption honoured,
// capacity reset, time passing) and checks after every step that capacity
// is never exceeded, that every ticket is decided exactly once, that the
// guard rails hold, and at the end that draining leaves nothing in flight or
// queued: zero leaked capacity. With prefillBound > 0 the pool also has
// max_prefill_tokens and with reserve > 0 reserve_urgent, and every
// admission of a class other than the most urgent must respect them.
func randomEvents(t *testing.T, p scheduler.Policy, n, prefillBound, reserve int) {
	const (
		maxInflight = 6
		maxTokens   = 4000
	)
	rails := scheduler.PreemptionConfig{MinLowerInflight: 2, MinRunTime: 5 * time.Millisecond, MaxPerRequest: 2}
	pc := scheduler.PoolConfig{MaxInflight: maxInflight, MaxInflightTokens: maxTokens, MaxPrefillTokens: prefillBound,
		ReserveUrgent: reserve, Aging: 200 * time.Millisecond, Preemption: rails}
	if p.Name() == "fifo" {
		pc.BatchWindow = 3 * time.Millisecond // exercise windows under one policy
	}
	m := machine(t, p, pc)
	rng := rand.New(rand.NewPCG(42, uint64(len(p.Name()))))
	cls := classes()
	prio := map[string]int{}
	for _, c := range cls {
		prio[c.Name] = c.Priority
	}

	now := t0
	waiting := newSet()
	running := newSet()
	var requeue []scheduler.Request
	decided := map[scheduler.Ticket]string{}
	preemptsByID := map[string]int{}
	limit := maxInflight
	nextID := 0
	top := cls[0].Priority
	for _, c := range cls {
		top = min(top, c.Priority)
	}
	// victim: the classes the policy's Victim allows for the most urgent
	// class, the only ones that may ever be preempted.
	victim := map[string]bool{}
	if pre, ok := p.(scheduler.Preemptor); ok {
		for _, c := range cls {
			victim[c.Name] = c.Priority > top && pre.Victim(&c, top)
		}
	}
	step := func() {
		prefill := running.prefill()
		inflight := running.len()
		d := m.Step(now)
		for _, tk := range d.Admitted {
			r := waiting.get(tk)
			if r == nil || decided[tk] != "" {
				t.Fatalf("ticket %d admitted twice or unknown (%q)", tk, decided[tk])
			}
			if prefillBound > 0 && prio[r.r.Class] != top && prefill > 0 && prefill+r.r.PromptTokens > prefillBound {
				t.Fatalf("%s request (prompt %d) admitted with %d prefill tokens outstanding, max_prefill_tokens %d",
					r.r.Class, r.r.PromptTokens, prefill, prefillBound)
			}
			if res := min(reserve, limit-1); prio[r.r.Class] != top && inflight >= limit-res {
				t.Fatalf("%s request admitted with %d in flight, limit %d, reserve_urgent %d", r.r.Class, inflight, limit, reserve)
			}
			prefill += r.r.PromptTokens
			inflight++
			decided[tk] = "admitted"
			waiting.del(tk)
			r.admittedAt = now
			running.add(tk, r)
		}
		for _, rj := range d.Rejected {
			if waiting.get(rj.Ticket) == nil || decided[rj.Ticket] != "" {
				t.Fatalf("ticket %d rejected while not waiting (%q)", rj.Ticket, decided[rj.Ticket])
			}
			decided[rj.Ticket] = "rejected"
			waiting.del(rj.Ticket)
		}
		for _, tk := range d.Preempted {
			r := running.get(tk)
			switch {
			case !scheduler.Preempts(p):
				t.Fatalf("%s preempted %d", p.Name(), tk)
			case r == nil || r.preempted:
				t.Fatalf("ticket %d preempted while not running or twice", tk)
			case !victim[r.r.Class]:
				t.Fatalf("class %s preempted, which Victim does not allow", r.r.Class)
			case now.Sub(r.admittedAt) < rails.MinRunTime:
				t.Fatalf("victim ran %v < min_run_time", now.Sub(r.admittedAt))
			}
			r.preempted = true
			running.preemptedSet[tk] = true
			preemptsByID[r.r.ID]++
			if preemptsByID[r.r.ID] > rails.MaxPerRequest {
				t.Fatalf("request %s preempted %d times, max %d", r.r.ID, preemptsByID[r.r.ID], rails.MaxPerRequest)
			}
		}
		s := m.Stats()[0]
		if s.InFlight != running.len() {
			t.Fatalf("machine has %d in flight, model %d", s.InFlight, running.len())
		}
		toks := running.tokens
		if s.InFlightTokens != toks || toks > maxTokens {
			t.Fatalf("tokens in flight %d, model %d, max %d", s.InFlightTokens, toks, maxTokens)
		}
		if s.PrefillTokens != running.prefill() {
			t.Fatalf("prefill tokens in flight %d, model %d", s.PrefillTokens, running.prefill())
		}
		if len(d.Admitted) > 0 && s.InFlight > limit {
			t.Fatalf("admitted past the limit: %d in flight, limit %d", s.InFlight, limit)
		}
		q := 0
		for _, v := range s.Queued {
			q += v
		}
		if q != waiting.len() {
			t.Fatalf("machine queues %d, model %d", q, waiting.len())
		}
	}
	arriveReq := func(r scheduler.Request) {
		tk, err := m.Arrive(now, r)
		if err != nil {
			return // queue full or too big: no ticket, nothing to track
		}
		if decided[tk] != "" || waiting.get(tk) != nil || running.get(tk) != nil {
			t.Fatalf("ticket %d reused", tk)
		}
		waiting.add(tk, &req{r: r})
	}
	for i := 0; i < n; i++ {
		switch k := rng.IntN(100); {
		case k < 30:
			nextID++
			c := cls[rng.IntN(len(cls))]
			arriveReq(scheduler.Request{ID: fmt.Sprint(nextID), Class: c.Name, PromptTokens: rng.IntN(1500), MaxTokens: rng.IntN(1500), Arrival: now})
		case k < 35 && len(requeue) > 0:
			r := requeue[0]
			requeue = requeue[1:]
			r.Requeue = true
			arriveReq(r)
		case k < 55 && running.len() > 0:
			tk, r := running.pick(rng)
			r.tokens += 1 + rng.IntN(20)
			m.Progress(now, tk, scheduler.Progress{FirstToken: true, Tokens: r.tokens})
		case k < 70 && running.len() > 0:
			tk, _ := running.pick(rng)
			o := []scheduler.Outcome{scheduler.Done, scheduler.Done, scheduler.Failed, scheduler.Cancelled}[rng.IntN(4)]
			m.Finish(now, tk, o)
			m.Finish(now, tk, o) // a second release is ignored
			running.del(tk)
		case k < 75 && waiting.len() > 0:
			tk, _ := waiting.pick(rng)
			m.Cancel(now, tk)
			m.Cancel(now, tk)
			waiting.del(tk)
			decided[tk] = "cancelled"
		case k < 85:
			for _, tk := range running.preempted() {
				r := running.get(tk)
				if rng.IntN(2) == 0 {
					m.Finish(now, tk, scheduler.Preempted)
					running.del(tk)
					if rng.IntN(4) > 0 {
						requeue = append(requeue, r.r)
					}
				}
			}
		case k < 87:
			limit = 1 + rng.IntN(maxInflight)
			if err := m.SetLimit("p", limit); err != nil {
				t.Fatal(err)
			}
		default:
			now = now.Add(time.Duration(rng.IntN(20)) * time.Millisecond)
		}
		step()
	}
	// Drain: everything released exactly once leaves nothing behind.
	for running.len() > 0 {
		tk, _ := running.pick(rng)
		m.Finish(now, tk, scheduler.Done)
		running.del(tk)
	}
	for waiting.len() > 0 {
		tk, _ := waiting.pick(rng)
		m.Cancel(now, tk)
		waiting.del(tk)
	}
	step()
	s := m.Stats()[0]
	if s.InFlight != 0 || s.InFlightTokens != 0 || s.PrefillTokens != 0 || s.Preempting != 0 {
		t.Fatalf("leaked capacity after drain: %+v", s)
	}
	for c, q := range s.Queued {
		if q != 0 {
			t.Fatalf("class %s still queues %d", c, q)
		}
	}
	if s.Admitted == 0 || (scheduler.Preempts(p) && s.Preempted == 0) {
		t.Fatalf("the run exercised too little: %+v", s.Counters)
	}
	t.Logf("%s: %+v", p.Name(), s.Counters)
}

type req struct {
	r          scheduler.Request
	admittedAt time.Time
	tokens     int
	preempted  bool // asked to stop, not yet released
}

// set is the test's model of waiting or running requests: O(1) add,
// delete and uniform pick, deterministic for a seeded generator.
type set struct {
	ids          []scheduler.Ticket
	idx          map[scheduler.Ticket]int
	reqs         map[scheduler.Ticket]*req
	tokens       int
	preemptedSet map[scheduler.Ticket]bool
}

func newSet() *set {
	return &set{idx: map[scheduler.Ticket]int{}, reqs: map[scheduler.Ticket]*req{}, preemptedSet: map[scheduler.Ticket]bool{}}
}

func (s *set) len() int                    { return len(s.ids) }
func (s *set) get(t scheduler.Ticket) *req { return s.reqs[t] }

func (s *set) add(t scheduler.Ticket, r *req) {
	s.idx[t] = len(s.ids)
	s.ids = append(s.ids, t)
	s.reqs[t] = r
	s.tokens += r.r.PromptTokens + r.r.MaxTokens
}

func (s *set) del(t scheduler.Ticket) {
	i, ok := s.idx[t]
	if !ok {
		return
	}
	last := s.ids[len(s.ids)-1]
	s.ids[i], s.idx[last] = last, i
	s.ids = s.ids[:len(s.ids)-1]
	s.tokens -= s.reqs[t].r.PromptTokens + s.reqs[t].r.MaxTokens
	delete(s.idx, t)
	delete(s.reqs, t)
	delete(s.preemptedSet, t)
}

func (s *set) pick(rng *rand.Rand) (scheduler.Ticket, *req) {
	t := s.ids[rng.IntN(len(s.ids))]
	return t, s.reqs[t]
}

// prefill is the prompt tokens of the requests without a first token.
func (s *set) prefill() int {
	n := 0
	for _, r := range s.reqs {
		if r.tokens == 0 {
			n += r.r.PromptTokens
		}
	}
	return n
}

// preempted lists the requests asked to stop, in ticket order.
func (s *set) preempted() []scheduler.Ticket {
	out := make([]scheduler.Ticket, 0, len(s.preemptedSet))
	for t := range s.preemptedSet {
		out = append(out, t)
	}
	slices.Sort(out)
	return out
}
