package server

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/llmesh/llmesh/sim"
)

// metrics are the engine's Prometheus series under vLLM's names, so
// anything that reads a vLLM /metrics (capacity learning, dashboards) reads
// the simulated engine the same way. Each server has its own registry.
type metrics struct {
	reg         *prometheus.Registry
	running     prometheus.Gauge
	waiting     prometheus.Gauge
	kvUsage     prometheus.Gauge
	preemptions prometheus.Counter
	ttftH       prometheus.Observer
	itlH        prometheus.Observer
	e2eH        prometheus.Observer
	queueH      prometheus.Observer
	promptT     prometheus.Counter
	genT        prometheus.Counter
	success     prometheus.Counter
	abortedC    prometheus.Counter
	peakG       prometheus.Gauge
	prefixQ     prometheus.Counter
	prefixH     prometheus.Counter
	lastPreempt int64 // engine total already counted; engine loop only
	lastQ       int64 // prefix queries already counted; engine loop only
	lastH       int64 // prefix hits already counted; engine loop only
	peak        int   // most requests the engine held at once; engine loop only
}

func newMetrics(model string) *metrics {
	reg := prometheus.NewRegistry()
	labels := prometheus.Labels{"model_name": model, "engine": "0"}
	gauge := func(name, help string) prometheus.Gauge {
		g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels})
		reg.MustRegister(g)
		return g
	}
	counter := func(name, help string, extra prometheus.Labels) prometheus.Counter {
		l := prometheus.Labels{}
		for k, v := range labels {
			l[k] = v
		}
		for k, v := range extra {
			l[k] = v
		}
		c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: l})
		reg.MustRegister(c)
		return c
	}
	hist := func(name, help string, buckets []float64) prometheus.Observer {
		h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, ConstLabels: labels, Buckets: buckets})
		reg.MustRegister(h)
		return h
	}
	// Buckets as vLLM uses them.
	ttftB := []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
	itlB := []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}
	reqB := []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
	return &metrics{
		reg:         reg,
		running:     gauge("vllm:num_requests_running", "Number of requests in model execution batches."),
		waiting:     gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed."),
		kvUsage:     gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage."),
		preemptions: counter("vllm:num_preemptions_total", "Cumulative number of preemption from the engine.", nil),
		ttftH:       hist("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", ttftB),
		itlH:        hist("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", itlB),
		e2eH:        hist("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", reqB),
		queueH:      hist("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", reqB),
		promptT:     counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.", nil),
		genT:        counter("vllm:generation_tokens_total", "Number of generation tokens processed.", nil),
		success:     counter("vllm:request_success_total", "Count of successfully processed requests.", prometheus.Labels{"finished_reason": "length"}),
		abortedC:    counter("llmesh_sim:requests_aborted_total", "Requests aborted by client disconnect or cancellation.", nil),
		prefixQ:     counter("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens.", nil),
		prefixH:     counter("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.", nil),
		peakG:       gauge("llmesh_sim:requests_peak", "Most requests (running and waiting) the engine held at once since it started."),
	}
}

func (m *metrics) gauges(e *sim.Engine) {
	m.running.Set(float64(e.Running()))
	m.waiting.Set(float64(e.Waiting()))
	m.kvUsage.Set(e.KVUsage())
	if p := e.Preemptions(); p > m.lastPreempt {
		m.preemptions.Add(float64(p - m.lastPreempt))
		m.lastPreempt = p
	}
	if q := e.PrefixQueries(); q > m.lastQ {
		m.prefixQ.Add(float64(q - m.lastQ))
		m.lastQ = q
	}
	if h := e.PrefixHits(); h > m.lastH {
		m.prefixH.Add(float64(h - m.lastH))
		m.lastH = h
	}
}

// inSystem records how many requests the engine holds at a step's start.
func (m *metrics) inSystem(n int) {
	if n > m.peak {
		m.peak = n
		m.peakG.Set(float64(n))
	}
}

func (m *metrics) queueTime(d time.Duration) { m.queueH.Observe(d.Seconds()) }
func (m *metrics) ttft(d time.Duration)      { m.ttftH.Observe(d.Seconds()) }
func (m *metrics) itl(d time.Duration)       { m.itlH.Observe(d.Seconds()) }
func (m *metrics) tokens(n int)              { m.genT.Add(float64(n)) }
func (m *metrics) aborted()                  { m.abortedC.Inc() }

// prompt counts a prompt once its prefill is done (aborted requests that got
// that far count too, as in vLLM).
func (m *metrics) prompt(n int) { m.promptT.Add(float64(n)) }

func (m *metrics) finished(e2e time.Duration) {
	m.e2eH.Observe(e2e.Seconds())
	m.success.Inc()
}
