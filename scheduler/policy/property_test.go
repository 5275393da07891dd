package policy_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/llmesh/llmesh/scheduler"
)

// randomEvents drives n random events (arrive, requeue, progress, finish,
// upstream error, cancel while waiting or running, preemption honoured,
// capacity reset, time passing) and checks after every step that capacity
// is never exceeded, that every ticket is decided exactly once, that the
// guard rails hold, and at the end that draining leaves nothing in flight or
// queued: zero leaked capacity.
func randomEvents(t *testing.T, p scheduler.Policy, n int) {
	const (
		maxInflight = 6
		maxTokens   = 4000
	)
	rails := scheduler.PreemptionConfig{MinLowerInflight: 2, MinRunTime: 5 * time.Millisecond, MaxPerRequest: 2}
	pc := scheduler.PoolConfig{MaxInflight: maxInflight, MaxInflightTokens: maxTokens, Aging: 200 * time.Millisecond, Preemption: rails}
	if p.Name() == "fifo" {
		pc.BatchWindow = 3 * time.Millisecond // exercise windows under one policy
	}
	m := machine(t, p, pc)
	rng := rand.New(rand.NewPCG(42, uint64(len(p.Name()))))
	cls := classes()
	prio := map[string]int{}
	preemptible := map[string]bool{}
	for _, c := range cls {
		prio[c.Name], preemptible[c.Name] = c.Priority, c.Preemptible
	}

	type req struct {
		r          scheduler.Request
		admittedAt time.Time
		tokens     int
		preempted  bool // asked to stop, not yet released
	}
	now := t0
	waiting := map[scheduler.Ticket]*req{}
	running := map[scheduler.Ticket]*req{}
	var requeue []scheduler.Request
	decided := map[scheduler.Ticket]string{}
	preemptsByID := map[string]int{}
	limit := maxInflight
	nextID := 0
	pick := func(mp map[scheduler.Ticket]*req) (scheduler.Ticket, *req) {
		// Map order is random; pick the smallest ticket ≥ a random one so
		// the run stays reproducible.
		var best scheduler.Ticket
		var br *req
		r := scheduler.Ticket(rng.Uint64N(uint64(nextID) + 1))
		for tk, v := range mp {
			if tk >= r && (br == nil || tk < best) {
				best, br = tk, v
			}
		}
		if br == nil {
			for tk, v := range mp {
				if br == nil || tk < best {
					best, br = tk, v
				}
			}
		}
		return best, br
	}
	step := func() {
		d := m.Step(now)
		for _, tk := range d.Admitted {
			r := waiting[tk]
			if r == nil || decided[tk] != "" {
				t.Fatalf("ticket %d admitted twice or unknown (%q)", tk, decided[tk])
			}
			decided[tk] = "admitted"
			delete(waiting, tk)
			r.admittedAt = now
			running[tk] = r
		}
		for _, rj := range d.Rejected {
			if waiting[rj.Ticket] == nil || decided[rj.Ticket] != "" {
				t.Fatalf("ticket %d rejected while not waiting (%q)", rj.Ticket, decided[rj.Ticket])
			}
			decided[rj.Ticket] = "rejected"
			delete(waiting, rj.Ticket)
		}
		for _, tk := range d.Preempted {
			r := running[tk]
			switch {
			case !p.Preempts():
				t.Fatalf("%s preempted %d", p.Name(), tk)
			case r == nil || r.preempted:
				t.Fatalf("ticket %d preempted while not running or twice", tk)
			case !preemptible[r.r.Class]:
				t.Fatalf("non-preemptible class %s preempted", r.r.Class)
			case now.Sub(r.admittedAt) < rails.MinRunTime:
				t.Fatalf("victim ran %v < min_run_time", now.Sub(r.admittedAt))
			}
			r.preempted = true
			preemptsByID[r.r.ID]++
			if preemptsByID[r.r.ID] > rails.MaxPerRequest {
				t.Fatalf("request %s preempted %d times, max %d", r.r.ID, preemptsByID[r.r.ID], rails.MaxPerRequest)
			}
		}
		s := m.Stats()[0]
		if s.InFlight != len(running) {
			t.Fatalf("machine has %d in flight, model %d", s.InFlight, len(running))
		}
		toks := 0
		for _, r := range running {
			toks += r.r.PromptTokens + r.r.MaxTokens
		}
		if s.InFlightTokens != toks || toks > maxTokens {
			t.Fatalf("tokens in flight %d, model %d, max %d", s.InFlightTokens, toks, maxTokens)
		}
		if len(d.Admitted) > 0 && s.InFlight > limit {
			t.Fatalf("admitted past the limit: %d in flight, limit %d", s.InFlight, limit)
		}
		q := 0
		for _, v := range s.Queued {
			q += v
		}
		if q != len(waiting) {
			t.Fatalf("machine queues %d, model %d", q, len(waiting))
		}
	}
	arriveReq := func(r scheduler.Request) {
		tk, err := m.Arrive(now, r)
		if err != nil {
			return // queue full or too big: no ticket, nothing to track
		}
		if decided[tk] != "" || waiting[tk] != nil || running[tk] != nil {
			t.Fatalf("ticket %d reused", tk)
		}
		waiting[tk] = &req{r: r}
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
		case k < 55 && len(running) > 0:
			tk, r := pick(running)
			r.tokens += 1 + rng.IntN(20)
			m.Progress(now, tk, scheduler.Progress{FirstToken: true, Tokens: r.tokens})
		case k < 70 && len(running) > 0:
			tk, _ := pick(running)
			o := []scheduler.Outcome{scheduler.Done, scheduler.Done, scheduler.Failed, scheduler.Cancelled}[rng.IntN(4)]
			m.Finish(now, tk, o)
			m.Finish(now, tk, o) // a second release is ignored
			delete(running, tk)
		case k < 75 && len(waiting) > 0:
			tk, _ := pick(waiting)
			m.Cancel(now, tk)
			m.Cancel(now, tk)
			delete(waiting, tk)
			decided[tk] = "cancelled"
		case k < 85:
			for tk, r := range running {
				if r.preempted && rng.IntN(2) == 0 {
					m.Finish(now, tk, scheduler.Preempted)
					delete(running, tk)
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
	for tk := range running {
		m.Finish(now, tk, scheduler.Done)
		delete(running, tk)
	}
	for tk := range waiting {
		m.Cancel(now, tk)
		delete(waiting, tk)
	}
	step()
	s := m.Stats()[0]
	if s.InFlight != 0 || s.InFlightTokens != 0 || s.Preempting != 0 {
		t.Fatalf("leaked capacity after drain: %+v", s)
	}
	for c, q := range s.Queued {
		if q != 0 {
			t.Fatalf("class %s still queues %d", c, q)
		}
	}
	if s.Admitted == 0 || (p.Preempts() && s.Preempted == 0) {
		t.Fatalf("the run exercised too little: %+v", s.Counters)
	}
	t.Logf("%s: %+v", p.Name(), s.Counters)
}
