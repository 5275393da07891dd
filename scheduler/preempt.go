package scheduler

import (
	"math"
	"time"
)

// TTFT prediction (used only by preemptive policies):
//
//	predicted TTFT(w) = (now − w.Arrival) + slotWait + prefill(w)
//
// prefill(w) is Config.PrefillPredictor when set, otherwise the pool's
// moving average (α = 0.2) of observed admit→first-token times. slotWait is
// the soonest predicted finish among in-flight requests not already being
// preempted, where one in-flight request's remaining time is
// (MaxTokens − tokens so far) × decode speed, plus its remaining prefill if
// it has no first token yet; the decode speed is the pool's moving average
// of observed time per output token, or the victim's class TPOT objective
// before any observation. A request without MaxTokens, or with no speed
// known, has unknown (infinite) remaining time. w is at risk when the
// prediction exceeds its class's TTFT objective times the pool's
// preemption Target (default 1); classes without one never trigger
// preemption.

// ewma is an exponentially weighted moving average of durations.
type ewma struct {
	v     float64
	known bool
}

const ewmaAlpha = 0.2

func (a *ewma) observe(d time.Duration) {
	if d < 0 {
		return
	}
	if !a.known {
		a.v, a.known = float64(d), true
		return
	}
	a.v += ewmaAlpha * (float64(d) - a.v)
}

func (a *ewma) value() time.Duration { return time.Duration(a.v) }

const forever = time.Duration(math.MaxInt64 / 4)

func (m *Machine) prefillFor(p *pool, promptTokens int) time.Duration {
	if m.cfg.PrefillPredictor != nil {
		return min(forever, max(0, m.cfg.PrefillPredictor(p.Name, promptTokens)))
	}
	return p.prefill.value()
}

// remaining predicts how long running request r still needs. The slot
// index (slotwait.go) relies on its shape: with a first token, a function
// of the tokens left that does not decrease as they grow, the same for
// every request of a class (TestSlotIndexIsTheWalk checks).
func (m *Machine) remaining(now time.Time, p *pool, r *entry) time.Duration {
	speed := r.class.TPOT
	if p.tpot.known {
		speed = p.tpot.value()
	}
	if r.req.MaxTokens == 0 || speed <= 0 {
		return forever
	}
	left := max(0, r.req.MaxTokens-r.tokens)
	if left > 0 && speed > forever/time.Duration(left) {
		return forever
	}
	rem := time.Duration(left) * speed
	if !r.firstToken {
		rem += max(0, m.prefillFor(p, r.req.PromptTokens)-now.Sub(r.admitted))
	}
	return rem
}

// slotWait predicts how long until an in-flight request not being
// preempted finishes on its own.
func (m *Machine) slotWait(now time.Time, p *pool) time.Duration {
	if p.inflight-p.preempting <= 0 {
		return 0
	}
	// The least of each class's heap and of the requests in prefill is
	// the least of all (slotwait.go).
	w := forever
	for _, r := range p.run.prefill {
		w = min(w, m.remaining(now, p, r))
	}
	for _, h := range p.run.byClass {
		if len(h) > 0 {
			w = min(w, m.remaining(now, p, h[0].e))
		}
	}
	return w
}

// atRisk reports whether waiting request e would miss its TTFT objective if
// it waited slotWait for a slot, and otherwise when it would become at risk
// with no further events.
func (m *Machine) atRisk(now time.Time, p *pool, e *entry, slotWait time.Duration) (bool, time.Time) {
	if e.class.TTFT <= 0 {
		return false, time.Time{}
	}
	budget := m.budget(p, e)
	prefill := m.prefillFor(p, e.req.PromptTokens)
	if now.Sub(e.Arrival)+slotWait+prefill > budget {
		return true, time.Time{}
	}
	latest := e.Arrival.Add(budget - prefill)
	if finish := now.Add(slotWait); finish.After(latest) {
		latest = finish
	}
	return false, latest.Add(time.Nanosecond)
}

// preemptGuard reports whether the mechanism lets the policy preempt in p
// now: some endpoint admits (allDrained), and the abort check (abort.go)
// allows, with probe when it allows one victim only, as a probe; while it
// does not, d asks for a wake-up at the next probe.
func (m *Machine) preemptGuard(now time.Time, p *pool, d *Decisions) (probe, ok bool) {
	if p.allDrained() {
		return false, false
	}
	mayPreempt, probe := p.abort.mayPreempt(now, p.Preemption.AbortProbe)
	if !mayPreempt {
		if at, ok := m.NextAbortProbe(p.Name); ok {
			d.wakeAt(at)
		}
		return false, false
	}
	return probe, true
}

// preemptVictims carries out a preemption the Preemptor chose (preemptwalk.go):
// each victim leaves the slot index, holds its capacity as being preempted
// until its Finish, counts against its preemption budget (kept by ID
// across its requeue) and is handed to the host in d. While the abort
// check probes, the victim is the probe.
func (m *Machine) preemptVictims(now time.Time, p *pool, d *Decisions, victims []Candidate, probe bool) {
	for _, c := range victims {
		v := c.e
		p.run.left(p, v)
		v.preempting = true
		p.preempting++
		v.ep.preempting++
		p.counts.Preempted++
		if v.req.ID != "" {
			m.preempted[p.Name+"\x00"+v.req.ID] = preemptRecord{count: v.preempts + 1, at: now}
		}
		d.Preempted = append(d.Preempted, v.ticket)
		if probe {
			p.abort.probe = v.ep
		}
	}
}

// walker yields a pool's waiting requests in policy order without
// disturbing the queues. It keeps each class's current head, aged once, so
// a step costs one comparison per class.
type walker struct {
	m    *Machine
	p    *pool
	pos  []int
	head []*entry // each class's current head; nil when exhausted
}

func newWalker(now time.Time, m *Machine, p *pool) *walker {
	w := &walker{m: m, p: p, pos: make([]int, len(p.queues)), head: make([]*entry, len(p.queues))}
	for ci := range p.queues {
		p.queues[ci].front()
		w.pos[ci] = p.queues[ci].head
		w.advance(now, ci)
	}
	return w
}

// advance makes class ci's head its first live entry at or after pos.
func (w *walker) advance(now time.Time, ci int) {
	q := &w.p.queues[ci]
	for w.pos[ci] < len(q.items) && q.items[w.pos[ci]].removed {
		w.pos[ci]++
	}
	w.head[ci] = nil
	if w.pos[ci] < len(q.items) {
		e := q.items[w.pos[ci]]
		w.m.age(now, w.p, e)
		w.head[ci] = e
	}
}

func (w *walker) next(now time.Time) *entry {
	var b *entry
	bi := -1
	for ci, e := range w.head {
		if e != nil && (b == nil || w.p.Policy.Less(&e.Entry, &b.Entry)) {
			b, bi = e, ci
		}
	}
	if b != nil {
		w.pos[bi]++
		w.advance(now, bi)
	}
	return b
}

// allDrained reports whether no endpoint of p admits anything: a slot a
// victim frees there goes to no one, so preempting would stop a request
// for nothing, and again at every step while the pool stays drained.
func (p *pool) allDrained() bool {
	for _, ep := range p.endpoints {
		if !ep.out() {
			return false
		}
	}
	return true
}
