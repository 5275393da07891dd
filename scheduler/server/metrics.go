package server

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/llmesh/llmesh/scheduler"
)

// Collector exports scheduler statistics as Prometheus metrics, read from
// stats at every scrape (so it holds no state of its own):
//
//	llmesh_scheduler_limit{pool}                 current admission limit
//	llmesh_scheduler_inflight{pool}              admitted, not yet released
//	llmesh_scheduler_inflight_tokens{pool}       their prompt+max tokens
//	llmesh_scheduler_preempting{pool}            asked to stop, not released
//	llmesh_scheduler_queued{pool,class}          waiting
//	llmesh_scheduler_prefill_estimate_seconds{pool}
//	llmesh_scheduler_tpot_estimate_seconds{pool}
//	llmesh_scheduler_events_total{pool,event}    arrived, requeued, admitted,
//	    rejected, queue_full, cancelled, done, failed, preempted,
//	    preempted_released
//	llmesh_scheduler_endpoint_limit{pool,endpoint}     the endpoint's limit
//	llmesh_scheduler_endpoint_inflight{pool,endpoint}  admitted to it
//	llmesh_scheduler_endpoint_preempting{pool,endpoint}
//	llmesh_scheduler_endpoint_drained{pool,endpoint}   1 while drained
//	llmesh_scheduler_endpoint_admitted_total{pool,endpoint}
//	llmesh_scheduler_endpoint_running{pool,endpoint}   the engine's own load
//	llmesh_scheduler_endpoint_waiting{pool,endpoint}   report (0 until its
//	llmesh_scheduler_endpoint_kv_usage{pool,endpoint}  first scrape)
//	llmesh_preemption_abort_unhonoured{pool}     1 while the pool's engine
//	    is marked as not honouring aborts (preemption off; scheduler/abort.go)
type Collector struct {
	stats func() []scheduler.PoolStats
	descs map[string]*prometheus.Desc
}

var _ prometheus.Collector = (*Collector)(nil)

// NewCollector exports stats, typically (*scheduler.Scheduler).Stats.
func NewCollector(stats func() []scheduler.PoolStats) *Collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("llmesh_scheduler_"+name, help, append([]string{"pool"}, labels...), nil)
	}
	return &Collector{stats: stats, descs: map[string]*prometheus.Desc{
		"limit":           d("limit", "Current admission limit of the pool (static or learned from the engine)."),
		"inflight":        d("inflight", "Admitted requests not yet released."),
		"inflight_tokens": d("inflight_tokens", "Prompt plus max tokens of the admitted requests."),
		"preempting":      d("preempting", "Admitted requests asked to stop and not yet released."),
		"queued":          d("queued", "Waiting requests.", "class"),
		"prefill":         d("prefill_estimate_seconds", "Moving average of admit to first token time used for TTFT predictions."),
		"tpot":            d("tpot_estimate_seconds", "Moving average of time per output token used for TTFT predictions."),
		"events":          d("events_total", "Scheduler events by kind.", "event"),
		"ep_limit":        d("endpoint_limit", "Current admission limit of the endpoint (static or learned from its engine).", "endpoint"),
		"ep_inflight":     d("endpoint_inflight", "Admitted requests bound to the endpoint, not yet released.", "endpoint"),
		"ep_preempting":   d("endpoint_preempting", "Requests on the endpoint asked to stop and not yet released.", "endpoint"),
		"ep_drained":      d("endpoint_drained", "1 while the endpoint is drained (gets no new admissions).", "endpoint"),
		"ep_admitted":     d("endpoint_admitted_total", "Admissions bound to the endpoint.", "endpoint"),
		"ep_running":      d("endpoint_running", "Sequences the endpoint's engine reports running (its last load report).", "endpoint"),
		"ep_waiting":      d("endpoint_waiting", "Sequences the endpoint's engine reports waiting (its last load report).", "endpoint"),
		"ep_kv":           d("endpoint_kv_usage", "Share of the endpoint's KV cache in use, 0..1 (its last load report).", "endpoint"),
		"reserve_urgent":  d("reserve_urgent", "Slots only the most urgent class may take, in effect now (static, or derived from traffic; 0: none)."),
		"max_prefill":     d("max_prefill_tokens", "Bound on admitted prompt tokens not yet prefilled for all but the most urgent class, in effect now (static, or derived; 0: none)."),
		"budget":          d("preemption_budget_seconds", "Predicted TTFT an urgent request at the prefill estimate may reach before preemption starts (0: the pool does not preempt)."),
		"abort_unhonoured": prometheus.NewDesc("llmesh_preemption_abort_unhonoured",
			"1 while the pool's engine kept running preempted requests after their abort, so the pool preempts nothing more.",
			[]string{"pool"}, nil),
	}}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	g := func(name string, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(c.descs[name], prometheus.GaugeValue, v, labels...)
	}
	for _, p := range c.stats() {
		g("limit", float64(p.Limit), p.Name)
		g("inflight", float64(p.InFlight), p.Name)
		g("inflight_tokens", float64(p.InFlightTokens), p.Name)
		g("preempting", float64(p.Preempting), p.Name)
		unhonoured := 0.0
		if p.AbortUnhonoured {
			unhonoured = 1
		}
		g("abort_unhonoured", unhonoured, p.Name)
		for class, n := range p.Queued {
			g("queued", float64(n), p.Name, class)
		}
		g("prefill", p.PrefillEstimate.Seconds(), p.Name)
		g("reserve_urgent", float64(p.Bounds.ReserveUrgent), p.Name)
		g("max_prefill", float64(p.Bounds.MaxPrefillTokens), p.Name)
		g("budget", p.Bounds.PreemptionBudget.Seconds(), p.Name)
		g("tpot", p.TPOTEstimate.Seconds(), p.Name)
		for _, e := range []struct {
			name string
			v    uint64
		}{
			{"arrived", p.Arrived}, {"requeued", p.Requeued}, {"admitted", p.Admitted}, {"rejected", p.Rejected},
			{"queue_full", p.QueueFull}, {"cancelled", p.Cancelled}, {"done", p.Done}, {"failed", p.Failed},
			{"preempted", p.Preempted}, {"preempted_released", p.PreemptedDone},
		} {
			ch <- prometheus.MustNewConstMetric(c.descs["events"], prometheus.CounterValue, float64(e.v), p.Name, e.name)
		}
		for _, e := range p.Endpoints {
			if e.Name == "" {
				continue // the pool's one unnamed endpoint: the pool gauges say it all
			}
			drained := 0.0
			if e.Drained {
				drained = 1
			}
			g("ep_limit", float64(e.Limit), p.Name, e.Name)
			g("ep_inflight", float64(e.InFlight), p.Name, e.Name)
			g("ep_preempting", float64(e.Preempting), p.Name, e.Name)
			g("ep_drained", drained, p.Name, e.Name)
			g("ep_running", float64(e.Load.Running), p.Name, e.Name)
			g("ep_waiting", float64(e.Load.Waiting), p.Name, e.Name)
			g("ep_kv", e.Load.KVUsage, p.Name, e.Name)
			ch <- prometheus.MustNewConstMetric(c.descs["ep_admitted"], prometheus.CounterValue, float64(e.Admitted), p.Name, e.Name)
		}
	}
}
