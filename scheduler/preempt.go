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

// remaining predicts how long running request r still needs.
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
	w := forever
	for _, r := range p.running {
		if !r.preempting {
			w = min(w, m.remaining(now, p, r))
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
	budget := e.class.TTFT
	if t := p.Preemption.Target; t > 0 && t < 1 {
		budget = time.Duration(float64(budget) * t)
	}
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

// preempt walks waiting requests in policy order as far as the pool's limit
// reaches. Admission is in that order, so each request needs the capacity
// of everything ahead of it plus its own: the walk keeps the balance of
// free (or being freed) slots and tokens minus what the requests walked so
// far take. A request the balance does not cover is predicted to wait for
// the soonest natural finish (optimistic for requests further back, which
// keeps preemption conservative); if that makes it at risk, victims are
// preempted until the balance covers it (and so everything ahead of it
// too: a slot freed for it would otherwise go to a request ahead). A request that is not at risk, or that no permitted
// set of victims can cover, does not stop the walk: one behind it may be
// at risk sooner (a longer predicted prefill, a tighter objective, a
// request ahead that aged past a more urgent class), and each one that is
// not at risk asks for a wake-up when it would become so. Only as many
// victims as make the balance cover the request are chosen.
func (m *Machine) preempt(now time.Time, p *pool, d *Decisions) {
	if p.Preemption.MaxPerRequest == 0 || p.waiting() == 0 {
		return
	}
	slots := p.limit - p.inflight + p.preempting
	toks := 0
	if p.MaxInflightTokens > 0 {
		toks = p.MaxInflightTokens - p.tokens
		for _, r := range p.running {
			if r.preempting {
				toks += r.cost
			}
		}
	}
	// covered: the balance after e leaves no request short; requests of
	// other than the most urgent priority must also leave the reserve.
	reserve := p.reserve()
	covered := func(e *entry, s, t int) bool {
		need := 0
		if e.Priority != m.top {
			need = reserve
		}
		return s >= need && (p.MaxInflightTokens == 0 || t >= 0)
	}
	w := newWalker(m, p)
	slotWait := time.Duration(-1) // computed when first needed
	// hopeless: the lowest priority value for which victims could not be
	// found; requests of that priority or less urgent cannot do better
	// (their victims are a subset, their shortfall at least as large).
	hopeless, anyHopeless := 0, false
	for walked := 0; walked < p.limit; walked++ {
		e := w.next(now)
		if e == nil {
			return
		}
		slots--
		toks -= e.cost
		if covered(e, slots, toks) {
			continue
		}
		if anyHopeless && e.Priority >= hopeless {
			continue
		}
		if slotWait < 0 {
			slotWait = m.slotWait(now, p)
		}
		risk, at := m.atRisk(now, p, e, slotWait)
		if !risk {
			if !at.IsZero() {
				d.wakeAt(at)
			}
			continue
		}
		victims, allowed, wake := m.victims(now, p, e)
		if !wake.IsZero() {
			d.wakeAt(wake)
		}
		s, t := slots, toks
		n := 0
		for n < min(allowed, len(victims)) && !covered(e, s, t) {
			// Selection, not a full sort: usually one victim is enough.
			best := n
			for i := n + 1; i < len(victims); i++ {
				if victimOrder(victims[i], victims[best]) < 0 {
					best = i
				}
			}
			victims[n], victims[best] = victims[best], victims[n]
			s++
			t += victims[n].cost
			n++
		}
		if !covered(e, s, t) {
			if !anyHopeless || e.Priority < hopeless {
				hopeless, anyHopeless = e.Priority, true
			}
			continue
		}
		for _, v := range victims[:n] {
			v.preempting = true
			p.preempting++
			p.counts.Preempted++
			if v.req.ID != "" {
				m.preempted[p.Name+"\x00"+v.req.ID] = preemptRecord{count: v.preempts + 1, at: now}
			}
			d.Preempted = append(d.Preempted, v.ticket)
		}
		slots, toks = s, t
		slotWait = -1 // the victims no longer count
	}
}

// victims lists the in-flight requests that may be preempted for e
// (unordered; victimOrder ranks them: no first token → fewest tokens →
// lowest priority → most recently admitted) and how many of them
// MinLowerInflight allows (preempting k needs at least MinLowerInflight
// lower-priority requests in flight before each one). wake is when a
// request now protected by MinRunTime becomes eligible.
func (m *Machine) victims(now time.Time, p *pool, e *entry) ([]*entry, int, time.Time) {
	var vs []*entry
	var wake time.Time
	lower := 0
	for _, r := range p.running {
		if r.preempting || r.Priority <= e.Priority {
			continue
		}
		lower++
		if !r.class.Preemptible || r.preempts >= p.Preemption.MaxPerRequest {
			continue
		}
		if ok := r.admitted.Add(p.Preemption.MinRunTime); ok.After(now) {
			if wake.IsZero() || ok.Before(wake) {
				wake = ok
			}
			continue
		}
		vs = append(vs, r)
	}
	return vs, max(0, lower-max(1, p.Preemption.MinLowerInflight)+1), wake
}

func victimOrder(a, b *entry) int {
	switch {
	case a.firstToken != b.firstToken:
		if !a.firstToken {
			return -1
		}
		return 1
	case a.tokens != b.tokens:
		return a.tokens - b.tokens
	case a.Priority != b.Priority:
		return b.Priority - a.Priority
	case !a.admitted.Equal(b.admitted):
		return b.admitted.Compare(a.admitted)
	}
	return int(int64(b.ticket) - int64(a.ticket))
}

// walker yields a pool's waiting requests in policy order without
// disturbing the queues.
type walker struct {
	m   *Machine
	p   *pool
	pos []int
}

func newWalker(m *Machine, p *pool) *walker {
	w := &walker{m: m, p: p, pos: make([]int, len(p.queues))}
	for i := range p.queues {
		p.queues[i].front()
		w.pos[i] = p.queues[i].head
	}
	return w
}

func (w *walker) next(now time.Time) *entry {
	var b *entry
	bi := -1
	for ci := range w.p.queues {
		q := &w.p.queues[ci]
		for w.pos[ci] < len(q.items) && q.items[w.pos[ci]].removed {
			w.pos[ci]++
		}
		if w.pos[ci] >= len(q.items) {
			continue
		}
		e := q.items[w.pos[ci]]
		w.m.age(now, w.p, e)
		if b == nil || w.p.Policy.Less(&e.Entry, &b.Entry) {
			b, bi = e, ci
		}
	}
	if b != nil {
		w.pos[bi]++
	}
	return b
}
