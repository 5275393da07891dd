package result

import "github.com/llmesh/llmesh/bench/provenance"

// Report is one run's summary. Field names up to RecomputedTokensFraction
// follow vllm bench serve's result JSON (durations in seconds, latencies in
// milliseconds); the rest are llmesh's.
type Report struct {
	// Identification (vLLM: date, backend, label, model_id, tokenizer_id,
	// num_prompts, request_rate, burstiness, max_concurrency).
	Date           string  `json:"date"`
	Backend        string  `json:"backend"`
	Label          string  `json:"label,omitempty"`
	ModelID        string  `json:"model_id"`
	TokenizerID    string  `json:"tokenizer_id"`
	NumPrompts     int     `json:"num_prompts"`
	RequestRate    float64 `json:"request_rate"`
	Burstiness     float64 `json:"burstiness"`
	MaxConcurrency int     `json:"max_concurrency,omitempty"`

	// Aggregates (vLLM names).
	Duration              float64 `json:"duration"`
	Completed             int     `json:"completed"`
	Failed                int     `json:"failed"`
	TotalInputTokens      int     `json:"total_input_tokens"`
	TotalOutputTokens     int     `json:"total_output_tokens"`
	RequestThroughput     float64 `json:"request_throughput"`
	RequestGoodput        float64 `json:"request_goodput"`
	OutputThroughput      float64 `json:"output_throughput"`
	TotalTokenThroughput  float64 `json:"total_token_throughput"`
	MaxOutputTokensPerS   float64 `json:"max_output_tokens_per_s"`
	MaxConcurrentRequests int     `json:"max_concurrent_requests"`

	MeanTTFTMs   float64 `json:"mean_ttft_ms"`
	MedianTTFTMs float64 `json:"median_ttft_ms"`
	StdTTFTMs    float64 `json:"std_ttft_ms"`
	P50TTFTMs    float64 `json:"p50_ttft_ms"`
	P90TTFTMs    float64 `json:"p90_ttft_ms"`
	P95TTFTMs    float64 `json:"p95_ttft_ms"`
	P99TTFTMs    float64 `json:"p99_ttft_ms"`
	P999TTFTMs   float64 `json:"p99.9_ttft_ms"`
	MeanTPOTMs   float64 `json:"mean_tpot_ms"`
	MedianTPOTMs float64 `json:"median_tpot_ms"`
	StdTPOTMs    float64 `json:"std_tpot_ms"`
	P50TPOTMs    float64 `json:"p50_tpot_ms"`
	P90TPOTMs    float64 `json:"p90_tpot_ms"`
	P95TPOTMs    float64 `json:"p95_tpot_ms"`
	P99TPOTMs    float64 `json:"p99_tpot_ms"`
	P999TPOTMs   float64 `json:"p99.9_tpot_ms"`
	MeanITLMs    float64 `json:"mean_itl_ms"`
	MedianITLMs  float64 `json:"median_itl_ms"`
	StdITLMs     float64 `json:"std_itl_ms"`
	P50ITLMs     float64 `json:"p50_itl_ms"`
	P90ITLMs     float64 `json:"p90_itl_ms"`
	P95ITLMs     float64 `json:"p95_itl_ms"`
	P99ITLMs     float64 `json:"p99_itl_ms"`
	P999ITLMs    float64 `json:"p99.9_itl_ms"`
	MeanE2ELMs   float64 `json:"mean_e2el_ms"`
	MedianE2ELMs float64 `json:"median_e2el_ms"`
	StdE2ELMs    float64 `json:"std_e2el_ms"`
	P50E2ELMs    float64 `json:"p50_e2el_ms"`
	P90E2ELMs    float64 `json:"p90_e2el_ms"`
	P95E2ELMs    float64 `json:"p95_e2el_ms"`
	P99E2ELMs    float64 `json:"p99_e2el_ms"`
	P999E2ELMs   float64 `json:"p99.9_e2el_ms"`

	// Per-request arrays, only in detailed reports (vLLM --save-detailed):
	// lengths, TTFTs in seconds, ITLs in seconds, error strings.
	InputLens  []int       `json:"input_lens,omitempty"`
	OutputLens []int       `json:"output_lens,omitempty"`
	TTFTs      []float64   `json:"ttfts,omitempty"`
	ITLs       [][]float64 `json:"itls,omitempty"`
	Errors     []string    `json:"errors,omitempty"`

	// llmesh fields.
	Workload string  `json:"workload"`
	Profile  string  `json:"profile,omitempty"`
	Target   string  `json:"target,omitempty"`
	Protocol string  `json:"protocol"`
	Seed     int64   `json:"seed"`
	Policy   string  `json:"policy,omitempty"`
	Load     float64 `json:"load,omitempty"`
	// OfferedRPS is the arrival schedule's rate: n−1 gaps over the
	// measured requests' first → last intended send (0 for a closed loop).
	// AchievedRPS is the completed (ok) requests per second of the run
	// window, the window of every other per-second figure (throughput,
	// goodput, tokens): first send → last end (Duration), but never
	// shorter than n / OfferedRPS, the time the schedule needs for the n
	// measured arrivals. So by construction goodput ≤ throughput =
	// achieved ≤ offered, and failed requests never count as achieved; a
	// run's tail (the last requests finishing) puts achieved below offered
	// even when every request went out on time and completed:
	// ScheduleLagMs says whether the harness kept up.
	OfferedRPS  float64 `json:"offered_rps"`
	AchievedRPS float64 `json:"achieved_rps"`
	// ScheduleLagMs is actual minus intended send time over measured
	// requests.
	ScheduleLagMs Lag `json:"schedule_lag_ms"`
	// Valid is false when the harness itself could not keep up (schedule
	// lag p99 above the workload's max_schedule_lag_p99) or nothing was
	// measured; InvalidReasons says why.
	Valid          bool     `json:"valid"`
	InvalidReasons []string `json:"invalid_reasons,omitempty"`
	// Requests counts measured requests by status (ok, error, …).
	Requests map[Status]int `json:"requests"`
	Warmup   int            `json:"warmup_requests"`
	// Overall merges all classes; Classes has one block per class.
	Overall *ClassReport            `json:"overall"`
	Classes map[string]*ClassReport `json:"classes"`
	// RecomputedTokensFraction is recomputed tokens / output tokens (known
	// from the simulator; 0 otherwise).
	RecomputedTokensFraction float64 `json:"recomputed_tokens_fraction"`
	// Timeline is the run in one-second (or coarser) buckets, for charts.
	Timeline []Bucket `json:"timeline,omitempty"`
	// TimelineFormat says which Bucket fields the timeline carries: 0 (files
	// written before the field) sent to E2E p50; TimelineFormat also
	// ClassTTFTP99Ms, MeshQueued and Preemptions, so their zeros are
	// measurements.
	TimelineFormat int `json:"timeline_format,omitempty"`
	// GPU is telemetry sampled during the run; GPUNote says why there is
	// none ("no GPU telemetry: …").
	GPU     *GPU   `json:"gpu,omitempty"`
	GPUNote string `json:"gpu_note,omitempty"`
	// EnginePrefixCache is what the engines' own prefix-cache counters
	// moved by during the run (bench run --engine-metrics); nil when not
	// asked for or not readable, and EnginePrefixCacheNote says why.
	EnginePrefixCache     *EnginePrefixCache `json:"engine_prefix_cache,omitempty"`
	EnginePrefixCacheNote string             `json:"engine_prefix_cache_note,omitempty"`
	// Engine compares client TTFT with the engine's own timestamps when
	// the target reported them.
	Engine *EngineAgreement `json:"engine_agreement,omitempty"`

	// Live is set on reports of a live mesh's traffic read from Prometheus
	// (`llmesh report slo`); nil on bench runs.
	Live *Live `json:"live,omitempty"`
	// OutputTokensSource counts completed requests by where their output
	// tokens came from ("usage": the engine's report, "stream": counted
	// by the client because the engine reported none, or 0).
	OutputTokensSource map[string]int `json:"output_tokens_source,omitempty"`
	// Provenance records the build, input files, seed and host of a
	// measured run (bench run); nil in a run embedded in a larger result
	// that carries its own.
	Provenance *provenance.Provenance `json:"provenance,omitempty"`
	// Primary is each class's primary metric of a paired A/B judgement
	// (class → metric, as the --primary flag's CLASS=METRIC), so that
	// bench compare over saved reports judges by it unless told
	// otherwise; PrimaryFrom says where it came from (--primary or
	// "workload FILE"). Both are empty when none was declared, and in a
	// run embedded in a larger result that records its own.
	Primary     map[string]string `json:"primary,omitempty"`
	PrimaryFrom string            `json:"primary_from,omitempty"`
}

// EnginePrefixCache is the change of the engines' prefix-cache counters
// (vllm:prefix_cache_queries_total and _hits_total, in tokens) from just
// before a run's first request to just after its last, summed over the
// engines scraped: the warm-up and any other traffic the engines served
// meanwhile count too.
type EnginePrefixCache struct {
	Engines       int   `json:"engines"`
	QueriedTokens int64 `json:"queried_tokens"`
	HitTokens     int64 `json:"hit_tokens"`
}

// Lag is a schedule-lag summary in milliseconds.
type Lag struct {
	P50 float64 `json:"p50"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

// Percentiles summarize one latency metric in milliseconds.
type Percentiles struct {
	N    int     `json:"n"`
	Mean float64 `json:"mean"`
	Std  float64 `json:"std"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P95  float64 `json:"p95"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p999"`
	Max  float64 `json:"max"`
}

// ClassReport is one class (or all of them, for Report.Overall).
type ClassReport struct {
	Priority         int     `json:"priority"`
	Share            float64 `json:"share"`
	Requests         int     `json:"requests"`
	Completed        int     `json:"completed"`
	Failed           int     `json:"failed"`
	SLOTTFTMs        float64 `json:"slo_ttft_ms,omitempty"`
	SLOTPOTMs        float64 `json:"slo_tpot_ms,omitempty"`
	AttainmentTarget float64 `json:"attainment_target,omitempty"`

	TTFTMs Percentiles `json:"ttft_ms"`
	TPOTMs Percentiles `json:"tpot_ms"`
	ITLMs  Percentiles `json:"itl_ms"`
	E2EMs  Percentiles `json:"e2e_ms"`

	// SLOAttainment is the share of measured requests meeting both SLOs
	// (failures count as misses); GoodputRPS those per second.
	SLOAttainment    float64 `json:"slo_attainment"`
	GoodputRPS       float64 `json:"goodput_rps"`
	ThroughputRPS    float64 `json:"throughput_rps"`
	OutputTokensPerS float64 `json:"output_tokens_per_s"`
	// MeetsTarget is SLOAttainment ≥ AttainmentTarget.
	MeetsTarget bool       `json:"meets_target"`
	Violations  Violations `json:"violations"`
	// EarlyStopping says whether the sample supports the percentile claims
	// (MLPerf early stopping, 99% confidence).
	EarlyStopping []EarlyStop `json:"early_stopping,omitempty"`
	Preemptions   int         `json:"preemptions,omitempty"`
	// QueueMs is the time requests waited for admission in llmesh
	// (arrival → admission): on bench runs from the responses'
	// Server-Timing, nil when none carried it; on live reports from the
	// queue-time histogram.
	QueueMs *Percentiles `json:"queue_ms,omitempty"`
	// TTFTCDF is the TTFT distribution as (ms, quantile) points for charts.
	TTFTCDF [][2]float64 `json:"ttft_cdf,omitempty"`

	// BudgetRemaining is the share of the error budget (1 −
	// attainment_target) left after the window's misses: 1 untouched, 0
	// spent, negative overspent. Set on live reports.
	BudgetRemaining *float64 `json:"budget_remaining,omitempty"`
	// WorstHours are the hours of the window with the lowest attainment,
	// worst first; set on live reports.
	WorstHours []Interval `json:"worst_hours,omitempty"`
}

// Violations break down SLO misses; a request is counted once, under its
// first cause in this order: rejected, preempted, error (including dropped
// and timeout), ttft, tpot (then tpot_unknown).
type Violations struct {
	TTFT int `json:"ttft"`
	TPOT int `json:"tpot"`
	// TPOTUnknown counts requests of a class with a TPOT SLO whose TPOT
	// could not be computed (no first token, or fewer than two output
	// tokens though more were asked for): unknown is not met.
	TPOTUnknown int `json:"tpot_unknown,omitempty"`
	Error       int `json:"error"`
	Rejected    int `json:"rejected"`
	// QueueFull counts requests llmesh's own queue refused (429 queue
	// full), apart from an engine's 429 (Rejected).
	QueueFull int `json:"queue_full,omitempty"`
	Preempted int `json:"preempted"`
}

// EarlyStop is an MLPerf-style early-stopping check of a percentile claim:
// with N samples, the claim "p-th percentile ≤ BoundMs" holds with 99%
// confidence; Valid is false when N is below MinSamples, the fewest samples
// for which any such bound exists.
type EarlyStop struct {
	Metric     string  `json:"metric"`
	Percentile float64 `json:"percentile"`
	N          int     `json:"n"`
	MinSamples int     `json:"min_samples"`
	Valid      bool    `json:"valid"`
	BoundMs    float64 `json:"bound_ms,omitempty"`
}

// TimelineFormat is the Report.TimelineFormat of timelines with
// Bucket.ClassTTFTP99Ms, MeshQueued and Preemptions.
const TimelineFormat = 2

// Bucket is one time slice of the run.
type Bucket struct {
	// StartS is the bucket start in seconds since the run's start.
	StartS float64 `json:"start_s"`
	Sent   int     `json:"sent"`
	Done   int     `json:"done"`
	Failed int     `json:"failed"`
	// OutputTokensPerS is tokens received in the bucket per second.
	OutputTokensPerS float64 `json:"output_tokens_per_s"`
	// InFlight is the number of requests sent and not done at the bucket's
	// end; Queued those sent without a first token yet.
	InFlight int `json:"in_flight"`
	Queued   int `json:"queued"`
	// MeshQueued is the number of requests waiting for admission in llmesh
	// at the bucket's end, from the responses' Server-Timing queue time
	// (a request waits from its send to send + queue time): the gateway's
	// or filter's queue as the harness sees it, without a scrape. Zero when
	// no response carried the entry (a class's QueueMs is nil then).
	MeshQueued int `json:"mesh_queued,omitempty"`
	// Preemptions are those of the requests that ended in the bucket (the
	// larger of llmesh's Server-Timing count and the engine's own): when a
	// request was preempted is not reported, when it ended is.
	Preemptions int `json:"preemptions,omitempty"`
	// TTFTP99Ms and E2EP50Ms are over requests finishing in the bucket.
	TTFTP99Ms float64 `json:"ttft_p99_ms"`
	E2EP50Ms  float64 `json:"e2e_p50_ms"`
	// ClassTTFTP99Ms is TTFTP99Ms per class, for classes with a request
	// finishing in the bucket.
	ClassTTFTP99Ms map[string]float64 `json:"class_ttft_p99_ms,omitempty"`
}

// GPU is GPU telemetry sampled during a run.
type GPU struct {
	Devices []GPUDevice `json:"devices"`
}

// GPUDevice summarizes one GPU's samples.
type GPUDevice struct {
	Index           int     `json:"index"`
	Name            string  `json:"name"`
	UUID            string  `json:"uuid,omitempty"`
	Samples         int     `json:"samples"`
	SMUtilMean      float64 `json:"sm_util_mean_pct"`
	SMUtilMax       float64 `json:"sm_util_max_pct"`
	MemUtilMean     float64 `json:"mem_util_mean_pct"`
	MemUsedMaxMiB   float64 `json:"mem_used_max_mib"`
	MemTotalMiB     float64 `json:"mem_total_mib"`
	PowerMeanW      float64 `json:"power_mean_w"`
	PowerMaxW       float64 `json:"power_max_w"`
	SMClockMeanMHz  float64 `json:"sm_clock_mean_mhz"`
	MemClockMeanMHz float64 `json:"mem_clock_mean_mhz"`
	// Series holds (seconds, SM util %, power W) for charts.
	Series [][3]float64 `json:"series,omitempty"`
}

// EngineAgreement compares client-side TTFT with the engine's
// arrival→first-token time for requests that reported both.
type EngineAgreement struct {
	N int `json:"n"`
	// DeltaMs is client TTFT minus engine TTFT (network, HTTP and harness
	// overhead), in milliseconds.
	DeltaMs Percentiles `json:"delta_ms"`
	// NegativeN counts requests whose client TTFT was shorter than the
	// engine's (clock skew or a measurement bug); they are left out of
	// DeltaMs.
	NegativeN int `json:"negative_n"`
	// Note explains a disagreement the numbers alone do not (an engine
	// clock running at another rate).
	Note string `json:"note,omitempty"`
}

// Live says where a live report's numbers come from.
type Live struct {
	// Prometheus is the server's base URL; Config the mesh config the
	// classes and SLOs came from.
	Prometheus string `json:"prometheus"`
	Config     string `json:"config"`
	// Start and End bound the window (RFC 3339); WindowS is its length.
	Start   string  `json:"start"`
	End     string  `json:"end"`
	WindowS float64 `json:"window_s"`
	// Note states how exact the counts and percentiles are.
	Note string `json:"note"`
}

// Interval is one stretch of a live report's window.
type Interval struct {
	Start      string  `json:"start"`
	Requests   float64 `json:"requests"`
	Attainment float64 `json:"attainment"`
}
