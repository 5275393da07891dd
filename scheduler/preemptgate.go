package scheduler

import (
	"slices"
	"time"
)

// preemptCanAct reports whether the preemption walk (preempt.go) could
// preempt anything at now; Step skips the walk when it cannot. The walk
// costs a pass over the waiting requests the balance covers plus passes
// over the running ones, once per event, and under a backlog that is most
// of a step's work while, typically, no request can be preempted at all.
// Two cases decide nothing for certain:
//
//   - the free (or being freed) slots cover every waiting request, with
//     the urgent reserve left: no request is short of a slot (with a token
//     bound the waiting requests' tokens would be needed too, so then the
//     walk runs);
//   - no running request may be a victim of any waiting request: a
//     victim must be of a preemptible class strictly less urgent than the
//     request it makes room for (and than every request short ahead of
//     it), so when none of those runs, not being preempted and under
//     max_per_request, for the most urgent class with requests waiting,
//     none can be chosen whatever the walk predicts. Under a deep backlog
//     of the least urgent class, with the urgent requests admitted on
//     arrival, that is nearly every step. Only an event (an arrival of a
//     more urgent request, an admission: each steps anyway) changes it;
//     the walk's wake-ups are for requests that become at risk, and one
//     at risk without a possible victim preempts nothing either;
//   - no running request is a permitted victim now (preemptible class, not
//     already being preempted, under max_per_request, less urgent than the
//     most urgent class, past min_run_time): none can be chosen. Only time
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

// victimsPossible reports whether some running request of a preemptible
// class less urgent than the most urgent class with requests waiting is
// not being preempted and under max_per_request: the victims any walk
// could consider (victims in preempt.go counts the same).
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
		if cl.Preemptible && cl.Priority > urgent && p.run.under[ci] > 0 {
			return true
		}
	}
	return false
}

// victimQueue holds a pool's running requests that may become victims
// (preemptible class, less urgent than the most urgent class, under
// max_per_request) in admission order, so that preemptCanAct finds the
// oldest one without a pass over every running request. Entries that
// finished or are being preempted leave it lazily.
type victimQueue struct {
	items []*entry
	head  int
	// unordered: an admission time went backwards (a clock that did), so
	// the front is not the oldest; firstEligible then scans.
	unordered bool
}

// admitted records e's admission; called once e is in p.running.
func (q *victimQueue) admitted(m *Machine, p *pool, e *entry) {
	if !p.Policy.Preempts() || !e.class.Preemptible || e.Priority <= m.top || e.preempts >= p.Preemption.MaxPerRequest {
		return
	}
	if n := len(q.items); n > q.head && e.admitted.Before(q.items[n-1].admitted) {
		q.unordered = true
	}
	if len(q.items) == cap(q.items) && len(q.items) >= 64 {
		// Full: drop what left (also behind a long-lived front), and grow
		// when most are live, so compactions cost O(1) per admission.
		n := 0
		for _, v := range q.items[q.head:] {
			if q.live(p, v) {
				q.items[n] = v
				n++
			}
		}
		clear(q.items[n:])
		q.items, q.head = q.items[:n], 0
		if n > cap(q.items)/2 {
			q.items = slices.Grow(q.items, n)
		}
	}
	q.items = append(q.items, e)
}

// live reports whether v is still running and not being preempted.
func (q *victimQueue) live(p *pool, v *entry) bool {
	return v.runIdx < len(p.running) && p.running[v.runIdx] == v && !v.preempting
}

// firstEligible returns the earliest admission time among the candidate
// victims; ok is false when there is none.
func (q *victimQueue) firstEligible(p *pool) (at time.Time, ok bool) {
	for q.head < len(q.items) && !q.live(p, q.items[q.head]) {
		q.items[q.head] = nil
		q.head++
	}
	if q.head == len(q.items) {
		q.items, q.head, q.unordered = q.items[:0], 0, false
		return time.Time{}, false
	}
	if !q.unordered {
		return q.items[q.head].admitted, true
	}
	at = q.items[q.head].admitted
	for _, v := range q.items[q.head+1:] {
		if q.live(p, v) && v.admitted.Before(at) {
			at = v.admitted
		}
	}
	return at, true
}
