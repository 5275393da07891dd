package envoy

import "github.com/envoyproxy/envoy/contrib/golang/common/go/api"

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
	overrideFailed api.CounterMetric
	queued, inflight api.GaugeMetric
}

func defineMetrics(cb api.ConfigCallbacks) *metrics {
	c := cb.DefineCounterMetric
	return &metrics{
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
		queued:            cb.DefineGaugeMetric(GaugeQueued),
		inflight:          cb.DefineGaugeMetric(GaugeInflight),
	}
}
