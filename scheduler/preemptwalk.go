package scheduler

import "time"

// The preemption walk: where a Preemptor's choices (policy.go; the
// preemptive policy's are scheduler/policy/preemptive) are asked for and
// carried out. The Machine supplies the mechanism, the Preemptor the
// choices:
//
//   - Gates: a pool preempts only when its Policy is a Preemptor, its
//     max_per_request is positive, requests wait, and some running request
//     may be a victim now (preemptCanAct: the classes the Preemptor's
//     Victim allows, under max_per_request, past min_run_time).
//   - Trigger: waiting requests are walked in policy order as far as the
//     pool's limit reaches; one the slot and token balance does not cover
//     (after everything ahead of it) is a rescue only when atRisk
//     (preempt.go) predicts its TTFT objective missed.
//   - Candidates (victims): running requests of a class the Preemptor's
//     Victim allows for the request and every request short ahead of it,
//     not being preempted, under max_per_request, past min_run_time, on the
//     endpoint the request will use (endpointVictims); min_lower_inflight
//     bounds how many; their costs (cost.go) come with them.
//   - Choice: the Preemptor's Choose; the victims are preempted when they
//     cover the request (preemptVictims, preempt.go).
//
// The walk's shortcuts (preemptCanAct, settled, the victim bounds) skip
// only what can decide nothing, given the promises of Preemptor.Victim
// and Choose's refused; TestPreemptGateDecidesTheSame checks the gate.

// mayBecomeVictim reports whether running request e could ever be chosen
// as a victim (the index of preemptgate.go keeps only those): a preempting
// policy whose Victim allows e's class for the most urgent class, under
// max_per_request.
func (m *Machine) mayBecomeVictim(p *pool, e *entry) bool {
	return p.pre != nil && p.victimTop[e.class.index] && e.preempts < p.Preemption.MaxPerRequest
}

// preemptCanAct reports whether the preemption walk could preempt anything
// at now; Step skips the walk when it cannot. The walk costs a pass over
// the waiting requests the balance covers plus passes over the running
// ones, once per event, and under a backlog that is most of a step's work
// while, typically, no request can be preempted at all. Three cases decide
// nothing for certain:
//
//   - the free (or being freed) slots cover every waiting request, with
//     the urgent reserve left: no request is short of a slot (with a token
//     bound the waiting requests' tokens would be needed too, so then the
//     walk runs);
//   - no running request may be a victim of any waiting request: a
//     victim must be of a class the Preemptor's Victim allows for the
//     request it makes room for (so strictly less urgent than it, and
//     than every request short ahead of it), so when none of those runs, not being preempted and under
//     max_per_request, for the most urgent class with requests waiting,
//     none can be chosen whatever the walk predicts. Under a deep backlog
//     of the least urgent class, with the urgent requests admitted on
//     arrival, that is nearly every step. Only an event (an arrival of a
//     more urgent request, an admission: each steps anyway) changes it;
//     the walk's wake-ups are for requests that become at risk, and one
//     at risk without a possible victim preempts nothing either;
//   - no running request is a permitted victim now (a class Victim allows
//     for the most urgent class, not already being preempted, under
//     max_per_request, past min_run_time): none can be chosen. Only time
//     (min_run_time passing) or an event (which steps anyway) changes
//     that, so d asks for a wake-up when the first protected one becomes
//     eligible; the walk's own wake-ups (when a request would become at
//     risk) are not needed before then, since it can preempt nothing.
func (m *Machine) preemptCanAct(now time.Time, p *pool, d *Decisions) bool {
	waiting := p.waiting()
	if waiting == 0 {
		return false
	}
	if p.MaxInflightTokens == 0 {
		if left := p.slotBalance() - waiting; left >= 0 && left >= m.reserveFor(p) {
			return false
		}
	}
	if !m.victimsPossible(p) {
		return false
	}
	if wake, ok := p.victims.firstEligible(p); ok {
		if at := wake.Add(p.Preemption.MinRunTime); at.After(now) {
			d.wakeAt(at)
			return false
		}
		return true
	}
	return false
}

// victimsPossible reports whether some running request of a class the
// Preemptor's Victim allows for the most urgent class with requests
// waiting is not being preempted and under max_per_request: the victims
// any walk could consider (victims counts the same). Victim is false for
// every class as or more urgent than that one, so the less urgent classes
// are all it needs asking about.
func (m *Machine) victimsPossible(p *pool) bool {
	urgent, any := 0, false
	for ci := range p.queues {
		if p.queues[ci].live > 0 && (!any || m.classes[ci].Priority < urgent) {
			urgent, any = m.classes[ci].Priority, true
		}
	}
	if !any {
		return false
	}
	for ci, cl := range m.classes {
		if p.run.under[ci] > 0 && cl.Priority > urgent && p.pre.Victim(&cl.ClassConfig, urgent) {
			return true
		}
	}
	return false
}

// preempt walks waiting requests in policy order as far as the pool's limit
// reaches. Admission is in that order, so each request needs the capacity
// of everything ahead of it plus its own: the walk keeps the balance of
// free (or being freed) slots and tokens minus what the requests walked so
// far take. A request the balance does not cover is predicted to wait for
// the soonest natural finish (optimistic for requests further back, which
// keeps preemption conservative); if that makes it at risk, victims are
// preempted until the balance covers it (and so everything ahead of it
// too: a slot freed for it would otherwise go to a request ahead). A
// request that is not at risk, or that no permitted set of victims can
// cover, does not stop the walk: one behind it may be at risk sooner (a
// longer predicted prefill, a tighter objective, a request ahead that aged
// past a more urgent class), and each one that is not at risk asks for a
// wake-up when it would become so. Only as many victims as make the
// balance cover the request are chosen.
func (m *Machine) preempt(now time.Time, p *pool, d *Decisions) {
	if p.Preemption.MaxPerRequest == 0 || p.waiting() == 0 {
		return
	}
	probe, ok := m.preemptGuard(now, p, d)
	if !ok {
		return
	}
	w := m.newPreemptWalk(now, p, probe)
	st := settled{calm: make([]bool, len(p.queues))}
	q := newWalker(now, m, p)
	if w.nVictims == 0 {
		return
	}
	for walked := 0; walked < p.limit; walked++ {
		e := q.next(now)
		if e == nil || !w.consider(e, d, &st) {
			return
		}
	}
}

// preemptWalk is one walk's balance and what it has learned so far.
type preemptWalk struct {
	m     *Machine
	p     *pool
	now   time.Time
	probe bool // abort.go: a probe is one victim, and ends the walk
	// slots and toks are the balance of free (or being freed) capacity
	// after the requests walked so far; toks only with a token bound.
	slots, toks int
	reserve     int           // slots a request of other than the most urgent priority must leave
	slotWait    time.Duration // the soonest natural finish; computed when first needed (-1 until then)
	// worstShort is the least urgent class priority among the requests
	// walked so far that the balance does not cover: a slot freed for a
	// later request goes to them first, so a victim must be less urgent
	// than they are too (preempting to swap equals is pure waste).
	worstShort int
	anyShort   bool
	// Upper bounds on what any victim search can find: when the requests
	// short of a slot already outnumber every possible victim, or one of
	// them is as little urgent as the least urgent possible victim (Victim
	// allows no class as or more urgent), no request further on can be
	// covered.
	nVictims, worstVictim int
}

// settled tracks which classes a walk is done with. A class is settled
// when nothing behind in it needs a look: one of its requests was not at
// risk (calm: with the observed prefill estimate, the same for every
// request, the ones behind it arrived later and become at risk later;
// their wake-up is later too), or no victims could cover a request of its
// priority or a more urgent one (hopeless: less urgent requests have fewer
// victims and a shortfall at least as large). Settled requests still take
// their place in the balance; once every class is settled the walk ends.
// It is apart from preemptWalk so that calm, small, stays on the stack.
type settled struct {
	calm        []bool
	hopeless    int
	anyHopeless bool
}

func (s *settled) class(m *Machine, ci int) bool {
	return s.calm[ci] || (s.anyHopeless && m.classes[ci].Priority >= s.hopeless)
}

func (s *settled) all(m *Machine) bool {
	for ci := range s.calm {
		if !s.class(m, ci) {
			return false
		}
	}
	return true
}

func (m *Machine) newPreemptWalk(now time.Time, p *pool, probe bool) preemptWalk {
	w := preemptWalk{m: m, p: p, now: now, probe: probe, slots: p.slotBalance(), slotWait: -1}
	if p.MaxInflightTokens > 0 {
		w.toks = p.MaxInflightTokens - p.tokens
		for _, r := range p.running {
			if r.preempting {
				w.toks += r.cost
			}
		}
	}
	w.reserve = m.reserveFor(p)
	for ci, n := range p.run.under {
		if cl := m.classes[ci]; n > 0 && p.victimTop[ci] {
			w.nVictims += n
			w.worstVictim = max(w.worstVictim, cl.Priority)
		}
	}
	return w
}

// needSlots is the slot balance e must leave: the reserve, unless e is of
// the most urgent priority.
func (w *preemptWalk) needSlots(e *entry) int {
	if e.Priority != w.m.top {
		return w.reserve
	}
	return 0
}

// covered reports whether the balance s, t after e leaves no request short.
func (w *preemptWalk) covered(e *entry, s, t int) bool {
	return s >= w.needSlots(e) && (w.p.MaxInflightTokens == 0 || t >= 0)
}

// short records that the balance does not cover e.
func (w *preemptWalk) short(e *entry) {
	if !w.anyShort || e.Priority > w.worstShort {
		w.worstShort, w.anyShort = e.Priority, true
	}
}

// consider takes waiting request e, next in policy order, into the
// balance and preempts for it if it is at risk; false ends the walk.
func (w *preemptWalk) consider(e *entry, d *Decisions, st *settled) bool {
	w.slots--
	w.toks -= e.cost
	if w.covered(e, w.slots, w.toks) {
		return true
	}
	if w.slots+w.nVictims < w.needSlots(e) || (w.anyShort && w.worstShort >= w.worstVictim) {
		return false
	}
	if st.class(w.m, e.class.index) {
		w.short(e)
		return true
	}
	if w.slotWait < 0 {
		w.slotWait = w.m.slotWait(w.now, w.p)
	}
	if risk, at := w.m.atRisk(w.now, w.p, e, w.slotWait); !risk {
		return w.notAtRisk(e, at, d, st)
	}
	return w.rescue(e, d, st)
}

// notAtRisk records a short request that is not at risk: a wake-up when it
// would become so, and with the observed prefill estimate its class is
// calm.
func (w *preemptWalk) notAtRisk(e *entry, at time.Time, d *Decisions, st *settled) bool {
	if !at.IsZero() {
		d.wakeAt(at)
	}
	w.short(e)
	if w.m.cfg.PrefillPredictor == nil || e.class.TTFT <= 0 {
		st.calm[e.class.index] = true
		return !st.all(w.m)
	}
	return true
}

// rescue asks the Preemptor to choose victims for at-risk request e among
// the candidates and preempts them when they cover it.
func (w *preemptWalk) rescue(e *entry, d *Decisions, st *settled) bool {
	m, p := w.m, w.p
	above := e.Priority
	if w.anyShort {
		above = max(above, w.worstShort)
	}
	cands, allowed, wake := m.victims(w.now, p, above)
	cands = m.endpointVictims(p, e, cands)
	if !wake.IsZero() {
		d.wakeAt(wake)
	}
	r := Rescue{Request: &e.Entry, Gain: m.gain(w.now, p, e, w.slotWait), Overloaded: p.obs.overloaded,
		Allowed: allowed, Probe: w.probe, Slots: w.slots, Need: w.needSlots(e),
		Tokens: w.toks, TokenBound: p.MaxInflightTokens > 0}
	m.costs(w.now, p, cands)
	n, refused := p.pre.Choose(&r, cands)
	n = min(n, allowed, len(cands)) // the guard rails hold whatever the Preemptor says
	if w.probe {
		n = min(n, 1)
	}
	s, t := w.slots+n, w.toks
	for i := range cands[:n] {
		t += cands[i].e.cost
	}
	if !w.covered(e, s, t) {
		return w.uncovered(e, refused, st)
	}
	m.preemptVictims(w.now, p, d, cands[:n], w.probe)
	if w.probe && n > 0 {
		return false // abort.go: nothing more until the probe's watch decides
	}
	w.slots, w.toks = s, t
	w.nVictims -= n
	w.slotWait = -1    // the victims no longer count
	w.anyShort = false // everything walked so far is covered now
	// The slot wait grew: requests found calm against the old one may be
	// at risk now.
	clear(st.calm)
	return true
}

// uncovered records that no chosen victims cover e; refused says the
// Preemptor's rules (not the victims' number) refused some.
func (w *preemptWalk) uncovered(e *entry, refused bool, st *settled) bool {
	w.short(e)
	switch {
	case refused && w.m.cfg.PrefillPredictor == nil:
		// A refusal settles the request's class: with the observed
		// prefill estimate the ones behind it waited less, so they gain
		// less and are worth no more victims (Preemptor.Choose promises
		// as much). It does not settle the less urgent classes: their gain
		// may be larger.
		st.calm[e.class.index] = true
	case !refused && (!st.anyHopeless || e.Priority < st.hopeless):
		st.hopeless, st.anyHopeless = e.Priority, true
	}
	return !st.all(w.m)
}

// victims lists the in-flight requests that may be preempted to free a
// slot for requests no more urgent than priority above, that is those of
// a class the Preemptor's Victim allows (unordered, costs not yet known),
// and how many of them MinLowerInflight allows (preempting k needs at
// least MinLowerInflight lower-priority requests in flight before each
// one). wake is when a request now protected by MinRunTime becomes
// eligible.
func (m *Machine) victims(now time.Time, p *pool, above int) ([]Candidate, int, time.Time) {
	// The counts per class (slotwait.go) give how many less urgent requests
	// run and whether any may be a victim at all; only then is a pass over
	// the running requests needed.
	lower, possible := 0, 0
	ok := p.victimOK
	for ci, cl := range m.classes {
		ok[ci] = false
		if cl.Priority > above {
			lower += p.run.active[ci]
			if ok[ci] = p.pre.Victim(&cl.ClassConfig, above); ok[ci] {
				possible += p.run.under[ci]
			}
		}
	}
	allowed := max(0, lower-max(1, p.Preemption.MinLowerInflight)+1)
	if possible == 0 {
		return nil, allowed, time.Time{}
	}
	var vs []Candidate
	var wake time.Time
	for _, r := range p.running {
		if r.preempting || !ok[r.class.index] || r.preempts >= p.Preemption.MaxPerRequest {
			continue
		}
		if at := r.admitted.Add(p.Preemption.MinRunTime); at.After(now) {
			if wake.IsZero() || at.Before(wake) {
				wake = at
			}
			continue
		}
		vs = append(vs, Candidate{e: r})
	}
	return vs, allowed, wake
}

// costs fills in what preempting each candidate costs (cost.go) and how
// soon it would free its slot by itself.
func (m *Machine) costs(now time.Time, p *pool, cs []Candidate) {
	for i := range cs {
		c := &cs[i]
		c.Recompute, c.Remaining, c.Sunk = m.recompute(now, p, c.e), m.remaining(now, p, c.e), m.sunk(now, p, c.e)
		c.Step = c.e.class.TPOT
		if p.tpot.known {
			c.Step = p.tpot.value()
		}
	}
}
