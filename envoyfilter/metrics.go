package envoyfilter

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/envoyproxy/envoy/contrib/golang/common/go/api"
)

// Envoy stat names the filter defines at Parse (counters and gauges only:
// the SDK has no histograms; those go through Env.Recorder).
const (
	StatRequests          = "llmesh.requests"
	StatAdmitted          = "llmesh.admitted"
	StatQueueFull         = "llmesh.queue_full"
	StatRejected          = "llmesh.rejected"
	StatUnavailable       = "llmesh.scheduler_unavailable"
	StatCancelledQueued   = "llmesh.cancelled_queued"
	StatPreempted         = "llmesh.preempted"
	StatRelocated         = "llmesh.relocated"
	StatRelocationErrors  = "llmesh.relocation_errors"
	StatObserveErrors     = "llmesh.observe_errors"
	StatPanics            = "llmesh.panics"
	StatRouteConfigErrors = "llmesh.config_route_errors"
	StatCompleted         = "llmesh.completed"
	StatFailed            = "llmesh.failed"
	GaugeQueued           = "llmesh.queued"
	GaugeInflight         = "llmesh.inflight"
)

// Engine priority guard stats: request bodies whose client-set engine
// priority was removed (untrusted source), those given their class's
// priority (a pool with engine_priority: class), and those refused because
// they could not be checked.
const (
	StatPriorityStripped = "llmesh.priority_stripped"
	StatPrioritySet      = "llmesh.priority_set"
	StatPriorityRefused  = "llmesh.priority_refused"
)

type metrics struct {
	requests, admitted, queueFull, rejected, unavailable, cancelledQueued,
	preempted, relocated, relocationErrors, observeErrors, panics,
	routeConfigErrors, completed, failed, priorityStripped, prioritySet, priorityRefused,
	overrideFailed stat
	queued, inflight stat
}

// stat is one Envoy counter or gauge of one config. An update made after
// Envoy dropped that config (an admission goroutine outliving its stream,
// see statSet) goes to the same stat of the newest live config instead:
// Envoy keeps one stat per name, whichever config defined it. Without a
// live config it is counted in LostStatUpdates.
type stat struct {
	set *statSet
	i   int
}

// Increment adds n (a gauge may go down).
func (s stat) Increment(n int64) {
	for set := s.set; set != nil; set = set.reg.live() {
		if set.increment(s.i, n) {
			return
		}
	}
	lostStatUpdates.Add(1)
}

// LostStatUpdates counts the stat updates made when no config was live;
// the SDK would have panicked on them (CAPIFilterIsGone).
func LostStatUpdates() uint64 { return lostStatUpdates.Load() }

var lostStatUpdates atomic.Uint64

// statSet is the stats one config defined, in defineMetrics' order. Once
// Envoy drops the config (Destroy), the SDK answers every update through
// it with a panic: the set is marked dropped first and updates move on.
type statSet struct {
	reg     *statRegistry
	dropped atomic.Bool
	m       []api.CounterMetric // counters and gauges share Increment
}

// increment reports false when the set is dropped, also when the SDK found
// the config gone before Destroy ran (it panics with errRequestFinished).
func (s *statSet) increment(i int, n int64) (ok bool) {
	if s.dropped.Load() {
		return false
	}
	defer func() {
		if e := recover(); e != nil {
			if !isConfigGone(e) {
				panic(e)
			}
			s.drop()
			ok = false
		}
	}()
	s.m[i].Increment(n)
	return true
}

func (s *statSet) drop() {
	s.dropped.Store(true)
	s.reg.remove(s)
}

// isConfigGone tells the SDK's panic for a config Envoy freed.
func isConfigGone(e interface{}) bool {
	msg, ok := e.(string)
	return ok && strings.Contains(msg, "request has been finished")
}

// statRegistry knows the live stat sets of one Plugin, newest last.
type statRegistry struct {
	mu   sync.Mutex
	sets []*statSet
}

func (r *statRegistry) add(s *statSet) {
	r.mu.Lock()
	r.sets = append(r.sets, s)
	r.mu.Unlock()
}

func (r *statRegistry) remove(s *statSet) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if i := slices.Index(r.sets, s); i >= 0 {
		// slices.Delete clears the freed slot: a set left in the backing
		// array would keep the SDK's config object from being finalized.
		r.sets = slices.Delete(r.sets, i, i+1)
	}
}

func (r *statRegistry) live() *statSet {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.sets) == 0 {
		return nil
	}
	return r.sets[len(r.sets)-1]
}

func defineMetrics(reg *statRegistry, cb api.ConfigCallbacks) *metrics {
	set := &statSet{reg: reg}
	c := func(name string) stat {
		set.m = append(set.m, cb.DefineCounterMetric(name))
		return stat{set: set, i: len(set.m) - 1}
	}
	g := func(name string) stat {
		set.m = append(set.m, cb.DefineGaugeMetric(name))
		return stat{set: set, i: len(set.m) - 1}
	}
	m := &metrics{
		requests:          c(StatRequests),
		admitted:          c(StatAdmitted),
		queueFull:         c(StatQueueFull),
		rejected:          c(StatRejected),
		unavailable:       c(StatUnavailable),
		cancelledQueued:   c(StatCancelledQueued),
		preempted:         c(StatPreempted),
		relocated:         c(StatRelocated),
		relocationErrors:  c(StatRelocationErrors),
		observeErrors:     c(StatObserveErrors),
		panics:            c(StatPanics),
		routeConfigErrors: c(StatRouteConfigErrors),
		completed:         c(StatCompleted),
		failed:            c(StatFailed),
		priorityStripped:  c(StatPriorityStripped),
		prioritySet:       c(StatPrioritySet),
		priorityRefused:   c(StatPriorityRefused),
		overrideFailed:    c(StatOverrideFailed),
		queued:            g(GaugeQueued),
		inflight:          g(GaugeInflight),
	}
	reg.add(set)
	return m
}
