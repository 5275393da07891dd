package scheduler

import "time"

// Abort watch: a preemption only makes room when the engine stops the
// victim once its client goes. Some engines keep generating after a
// disconnect (llmesh sim --quirks no-abort reproduces one), so a victim
// still occupies the engine while the scheduler counts its slot free.
//
// The rule, per endpoint, from the engine's own load reports
// (ObserveEndpointLoad, fed by the capacity watcher from the engine's
// /metrics):
//
//	excess = (engine running + engine waiting) − llmesh's in flight there
//
// is what the engine holds beyond llmesh's admitted requests (other
// clients' traffic, or victims it did not stop). Each report records it.
// When a preempted request's lease is released, the excess of the last
// report before the release is the baseline. The engine honoured the
// abort when abortReports consecutive reports after the release show an
// excess at or below the baseline; it did not when abortReports
// consecutive reports after the release all show more, the last at least
// abortGrace after the release.
//
// One report decides nothing because a report is not a snapshot of both
// sides at once: the engine's counts are from when it was scraped, the
// in-flight count from when the report arrives, and a request admitted
// here reaches the engine a moment later. A report taken while a request
// was on its way (the urgent one the victim made room for, or the
// victim's own continuation), or scraped before the release, shows the
// engine holding no more than llmesh and would otherwise end the watch as
// "honoured" on an engine that keeps the victim running; the same lag
// the other way shows a short excess on an engine that did stop it. Such
// reports are alone; the engine's real state holds report after report.
// The pool is then marked "abort not honoured": it preempts nothing more
// (admission goes on, without preemption) until the scheduler restarts or
// its configuration is reloaded. Without load reports (no capacity
// metrics for the pool's endpoints) nothing is observed and nothing is
// marked.
const (
	abortReports = 3
	abortGrace   = time.Second
)

// abortWatch is one endpoint's pending check.
type abortWatch struct {
	active   bool
	released time.Time // the first unchecked release
	baseline int
	above    int // consecutive reports above the baseline
	below    int // consecutive reports at or below it
}

// preemptReleased starts (or keeps) the watch on ep after a preempted
// lease there was released at now.
func (ep *endpoint) preemptReleased(now time.Time) {
	if ep.abort.active {
		return
	}
	ep.abort = abortWatch{active: true, released: now, baseline: ep.excess}
}

// ObserveEndpointLoad is SetEndpointLoad at now, checking whether the
// engine released the slots of requests preempted there (see the rule
// above). It reports whether this report marked the pool as not honouring
// aborts.
func (m *Machine) ObserveEndpointLoad(now time.Time, poolName, name string, l EndpointLoad) (bool, error) {
	p, ep, err := m.endpoint(poolName, name)
	if err != nil {
		return false, err
	}
	ep.load = l
	excess := max(0, l.Running+l.Waiting-ep.inflight)
	ep.excess = excess
	w := &ep.abort
	if !w.active || p.abortUnhonoured {
		return false, nil
	}
	if excess <= w.baseline {
		w.above = 0
		if w.below++; w.below >= abortReports {
			*w = abortWatch{}
		}
		return false, nil
	}
	w.below = 0
	w.above++
	if w.above >= abortReports && now.Sub(w.released) >= abortGrace {
		*w = abortWatch{}
		p.abortUnhonoured = true
		return true, nil
	}
	return false, nil
}

// AbortUnhonoured reports whether pool is marked as not honouring aborts.
func (m *Machine) AbortUnhonoured(poolName string) bool {
	p := m.poolByName[poolName]
	return p != nil && p.abortUnhonoured
}
