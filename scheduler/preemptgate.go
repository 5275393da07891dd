package scheduler

import (
	"slices"
	"time"
)

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
	if !m.mayBecomeVictim(p, e) {
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
