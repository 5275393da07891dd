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
// (admission goes on, without preemption). Without load reports (no
// capacity metrics for the pool's endpoints) nothing is observed and
// nothing is marked.
//
// Recovery (PreemptionConfig.AbortProbe > 0): an engine may be fixed or
// replaced behind the same address, so a marked pool tries once more
// AbortProbe after it was marked: one probe preemption, one victim, and
// nothing else preempted until the watch on its endpoint decides. If the
// engine honoured it the mark is lifted; if not the pool stays marked and
// waits twice as long before the next probe (at most abortProbeMax × the
// first wait). A restart or a configuration reload of the pool also
// clears the mark.
const (
	abortReports = 3
	abortGrace   = time.Second
	// abortProbeMax bounds the back-off between probes: the wait doubles
	// after each failed probe up to this many times AbortProbe.
	abortProbeMax = 16
)

// AbortChange is what one load report changed in a pool's abort state.
type AbortChange int

const (
	// AbortNoChange: nothing was decided.
	AbortNoChange AbortChange = iota
	// AbortMarked: the engine kept a victim running; the pool is now
	// marked and preempts nothing more.
	AbortMarked
	// AbortProbeFailed: the probe preemption of a marked pool freed
	// nothing either; it stays marked until the next probe.
	AbortProbeFailed
	// AbortUnmarked: the engine stopped the probe's victim; the mark is
	// lifted and the pool preempts again.
	AbortUnmarked
)

// abortState is a pool's mark and its recovery.
type abortState struct {
	marked  bool
	probeAt time.Time     // when the next probe may preempt (AbortProbe > 0)
	wait    time.Duration // the wait that set probeAt; doubles per failed probe
	probe   *endpoint     // the probe's endpoint while its watch decides
}

// mayPreempt reports whether a pool in state a may preempt at now, and
// whether that preemption is a probe (one victim, then nothing until its
// watch decides).
func (a *abortState) mayPreempt(now time.Time, probeAfter time.Duration) (ok, probe bool) {
	switch {
	case !a.marked:
		return true, false
	case probeAfter <= 0 || a.probe != nil || now.Before(a.probeAt):
		return false, false
	}
	return true, true
}

// mark records that the engine kept a victim running at now; wait is the
// time to the next probe.
func (a *abortState) mark(now time.Time, wait time.Duration) {
	*a = abortState{marked: true, wait: wait, probeAt: now.Add(wait)}
}

// NextAbortProbe returns when a marked pool will next try one probe
// preemption; false when the pool is not marked, a probe is being watched,
// or it never probes (AbortProbe 0).
func (m *Machine) NextAbortProbe(poolName string) (time.Time, bool) {
	p := m.poolByName[poolName]
	if p == nil || !p.abort.marked || p.abort.probe != nil || p.Preemption.AbortProbe <= 0 {
		return time.Time{}, false
	}
	return p.abort.probeAt, true
}

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
// above). It reports what this report changed in the pool's abort state.
func (m *Machine) ObserveEndpointLoad(now time.Time, poolName, name string, l EndpointLoad) (AbortChange, error) {
	p, ep, err := m.endpoint(poolName, name)
	if err != nil {
		return AbortNoChange, err
	}
	ep.load = l
	excess := max(0, l.Running+l.Waiting-ep.inflight)
	ep.excess = excess
	w := &ep.abort
	if !w.active {
		return AbortNoChange, nil
	}
	if p.abort.marked && p.abort.probe != ep {
		// Only the probe's watch decides for a marked pool; releases of
		// victims chosen before the mark say nothing new.
		*w = abortWatch{}
		return AbortNoChange, nil
	}
	if excess <= w.baseline {
		w.above = 0
		if w.below++; w.below < abortReports {
			return AbortNoChange, nil
		}
		*w = abortWatch{}
		if p.abort.marked {
			p.abort = abortState{}
			return AbortUnmarked, nil
		}
		return AbortNoChange, nil
	}
	w.below = 0
	w.above++
	if w.above < abortReports || now.Sub(w.released) < abortGrace {
		return AbortNoChange, nil
	}
	*w = abortWatch{}
	if p.abort.marked {
		p.abort.mark(now, min(2*p.abort.wait, abortProbeMax*p.Preemption.AbortProbe))
		return AbortProbeFailed, nil
	}
	for _, other := range p.endpoints {
		other.abort = abortWatch{}
	}
	p.abort.mark(now, p.Preemption.AbortProbe)
	return AbortMarked, nil
}

// AbortUnhonoured reports whether pool is marked as not honouring aborts.
func (m *Machine) AbortUnhonoured(poolName string) bool {
	p := m.poolByName[poolName]
	return p != nil && p.abort.marked
}
