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
	if p.Preemption.MaxPerRequest == 0 || p.waiting() == 0 || p.allDrained() {
		return
	}
	mayPreempt, probe := p.abort.mayPreempt(now, p.Preemption.AbortProbe)
	if !mayPreempt {
		if at, ok := m.NextAbortProbe(p.Name); ok {
			d.wakeAt(at)
		}
		return
	}
	slots := p.slotBalance()
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
	reserve := m.reserveFor(p)
	needSlots := func(e *entry) int {
		if e.Priority != m.top {
			return reserve
		}
		return 0
	}
	covered := func(e *entry, s, t int) bool {
		return s >= needSlots(e) && (p.MaxInflightTokens == 0 || t >= 0)
	}
	w := newWalker(now, m, p)
	slotWait := time.Duration(-1) // computed when first needed
	// A class is settled when nothing behind in it needs a look: one of its
	// requests was not at risk (calm: with the observed prefill estimate,
	// the same for every request, the ones behind it arrived later and
	// become at risk later; their wake-up is later too), or no victims
	// could cover a request of its priority or a more urgent one (hopeless:
	// less urgent requests have fewer victims and a shortfall at least as
	// large). Settled requests still take their place in the balance; once
	// every class is settled the walk ends.
	calm := make([]bool, len(p.queues))
	hopeless, anyHopeless := 0, false
	isSettled := func(ci int) bool {
		return calm[ci] || (anyHopeless && m.classes[ci].Priority >= hopeless)
	}
	allSettled := func() bool {
		for ci := range calm {
			if !isSettled(ci) {
				return false
			}
		}
		return true
	}
	// worstShort is the least urgent class priority among the requests
	// walked so far that the balance does not cover: a slot freed for a
	// later request goes to them first, so a victim must be less urgent
	// than they are too (preempting to swap equals is pure waste).
	worstShort, anyShort := 0, false
	short := func(e *entry) {
		if !anyShort || e.Priority > worstShort {
			worstShort, anyShort = e.Priority, true
		}
	}
	// Upper bounds on what any victim search can find: when the requests
	// short of a slot already outnumber every possible victim, or one of
	// them is as little urgent as the least urgent possible victim, no
	// request further on can be covered.
	nVictims, worstVictim := 0, 0
	for ci, n := range p.run.under {
		if cl := m.classes[ci]; n > 0 && cl.Preemptible && cl.Priority > m.top {
			nVictims += n
			worstVictim = max(worstVictim, cl.Priority)
		}
	}
	if nVictims == 0 {
		return
	}
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
		if slots+nVictims < needSlots(e) || (anyShort && worstShort >= worstVictim) {
			return
		}
		if isSettled(e.class.index) {
			short(e)
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
			short(e)
			if m.cfg.PrefillPredictor == nil || e.class.TTFT <= 0 {
				calm[e.class.index] = true
				if allSettled() {
					return
				}
			}
			continue
		}
		above := e.Priority
		if anyShort {
			above = max(above, worstShort)
		}
		victims, allowed, wake := m.victims(now, p, above)
		victims = m.endpointVictims(p, e, victims)
		if !wake.IsZero() {
			d.wakeAt(wake)
		}
		// The cost rules (cost.go): only victims that do not finish within
		// a step and whose recompute is less than the gain, cheapest first,
		// together costing less than the gain.
		gain := m.gain(now, p, e, slotWait)
		cands := m.worthIt(now, p, victims, gain)
		s, t := slots, toks
		n, most := 0, min(allowed, len(cands))
		if probe {
			most = min(most, 1) // abort.go: a probe is one victim
		}
		if !m.feasibleCands(p, slots+most-needSlots(e), toks, cands) {
			most = 0 // even every permitted victim would not do: skip the selection
		}
		var spent time.Duration
		for n < most && !covered(e, s, t) {
			// Selection, not a full sort: usually one victim is enough.
			best := n
			for i := n + 1; i < len(cands); i++ {
				if costOrder(cands[i], cands[best]) < 0 {
					best = i
				}
			}
			cands[n], cands[best] = cands[best], cands[n]
			if spent += cands[n].recompute; spent >= gain {
				break // the victims would cost more than waiting
			}
			s++
			t += cands[n].cost
			n++
		}
		if !covered(e, s, t) {
			short(e)
			refused := len(cands) < len(victims) || n < min(allowed, len(cands))
			switch {
			case refused && m.cfg.PrefillPredictor == nil:
				// A cost refusal settles the request's class: with the
				// observed prefill estimate the ones behind it waited less,
				// so they gain less and can afford no more victims. It does
				// not settle the less urgent classes: their gain may be
				// larger.
				calm[e.class.index] = true
			case !refused && (!anyHopeless || e.Priority < hopeless):
				hopeless, anyHopeless = e.Priority, true
			}
			if allSettled() {
				return
			}
			continue
		}
		for _, c := range cands[:n] {
			v := c.entry
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
		if probe && n > 0 {
			return // abort.go: nothing more until the probe's watch decides
		}
		slots, toks = s, t
		nVictims -= n
		slotWait = -1    // the victims no longer count
		anyShort = false // everything walked so far is covered now
		// The slot wait grew: requests found calm against the old one may
		// be at risk now.
		clear(calm)
	}
}

// feasibleCands reports whether preempting the candidates could cover a
// request whose slot balance with every permitted victim gone would be
// slots and whose token balance now is toks.
func (m *Machine) feasibleCands(p *pool, slots, toks int, cs []candidate) bool {
	if slots < 0 {
		return false
	}
	if p.MaxInflightTokens == 0 {
		return true
	}
	for _, c := range cs {
		toks += c.cost
	}
	return toks >= 0
}

// victims lists the in-flight requests that may be preempted to free a slot
// for requests no more urgent than priority above, that is those of a
// strictly less urgent class (unordered; victimOrder ranks them: no first token → fewest tokens →
// lowest priority → most recently admitted) and how many of them
// MinLowerInflight allows (preempting k needs at least MinLowerInflight
// lower-priority requests in flight before each one). wake is when a
// request now protected by MinRunTime becomes eligible.
func (m *Machine) victims(now time.Time, p *pool, above int) ([]*entry, int, time.Time) {
	// The counts per class (slotwait.go) give how many less urgent requests
	// run and whether any may be a victim at all; only then is a pass over
	// the running requests needed.
	lower, possible := 0, 0
	for ci, cl := range m.classes {
		if cl.Priority > above {
			lower += p.run.active[ci]
			if cl.Preemptible {
				possible += p.run.under[ci]
			}
		}
	}
	allowed := max(0, lower-max(1, p.Preemption.MinLowerInflight)+1)
	if possible == 0 {
		return nil, allowed, time.Time{}
	}
	var vs []*entry
	var wake time.Time
	for _, r := range p.running {
		if r.preempting || r.Priority <= above {
			continue
		}
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
	return vs, allowed, wake
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
