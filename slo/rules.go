// Package slo turns a mesh config's classes and pools into what an operator
// of a live mesh loads into Prometheus and Grafana: recording rules, the
// multiwindow, multi-burn-rate alerts on each class's error budget, the
// capacity alerts, and a dashboard whose panels read those rules. The SLOs
// live in the mesh config, so everything here is generated from it and
// regenerated when it changes (`llmesh slo rules`, `llmesh slo dashboard`).
//
// The metric names are those the hosts export (docs/metrics.md) and the
// scheduler's pool gauges (scheduler/server.Collector). Nothing here talks
// to Prometheus; package slo/live does, for `llmesh report slo`.
package slo

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/llmesh/llmesh/config"
)

// Exported metric names the rules read (docs/metrics.md; scheduler/server).
const (
	MetricRequests    = "llmesh_requests_total"
	MetricViolations  = "llmesh_slo_violations_total"
	MetricPreemptions = "llmesh_preemptions_total"
	MetricTTFT        = "gen_ai_server_time_to_first_token_seconds"
	MetricTPOT        = "gen_ai_server_time_per_output_token_seconds"
	MetricQueue       = "llmesh_queue_duration_seconds"
	MetricDuration    = "gen_ai_server_request_duration_seconds"
	MetricITL         = "llmesh_inter_chunk_duration_seconds"
	MetricTokens      = "gen_ai_client_token_usage"
	MetricLimit       = "llmesh_scheduler_limit"
	MetricInflight    = "llmesh_scheduler_inflight"
	MetricQueued      = "llmesh_scheduler_queued"
	MetricPreempting  = "llmesh_scheduler_preempting"
	// MetricAbortUnhonoured is 1 while a pool's engine does not honour
	// aborts: a preemption there frees no engine capacity.
	MetricAbortUnhonoured = "llmesh_preemption_abort_unhonoured"
	// MetricEnginePreemptions counts the engine's own preemptions, each a
	// recompute of the sequence's prompt and output (vLLM's name; the sim
	// exports it too).
	MetricEnginePreemptions = "vllm:num_preemptions_total"

	LabelClass = "llmesh_class"
	LabelModel = "gen_ai_request_model"
	LabelPool  = "pool"
)

// Windows are the attainment windows recorded per class: the short and
// long windows of every burn-rate pair.
var Windows = []string{"5m", "30m", "1h", "2h", "6h", "1d", "3d"}

// BurnRate is one multiwindow burn-rate alert: it fires while the error
// ratio over both windows exceeds Factor times the error budget (1 − the
// class's attainment target). Factor 14.4 over 1h spends 2% of a 30-day
// budget in that hour.
type BurnRate struct {
	Long, Short string
	Factor      float64
	Severity    string
}

// BurnRates are the four pairs of the Google SRE Workbook, chapter 5
// "Alerting on SLOs", "6: Multiwindow, Multi-Burn-Rate Alerts": page at
// 14.4× (1h/5m, 2% of a 30-day budget) and 6× (6h/30m, 5%); ticket at 3×
// (1d/2h, 10%) and 1× (3d/6h, 10%). The short window is 1/12 of the long
// one, so an alert stops soon after the burn does.
var BurnRates = []BurnRate{
	{"1h", "5m", 14.4, "page"},
	{"6h", "30m", 6, "page"},
	{"1d", "2h", 3, "ticket"},
	{"3d", "6h", 1, "ticket"},
}

// Options tune the generated rules. The zero value is usable.
type Options struct {
	// SchedulerJob is the Prometheus job scraping the shared scheduler
	// service's admin /metrics; "" means "llmesh-scheduler". Used only when
	// the mesh has a scheduler_service.
	SchedulerJob string
}

// RuleFile is a Prometheus rule file (the `groups:` document promtool
// checks).
type RuleFile struct {
	Groups []Group `yaml:"groups"`
}

// Group is one rule group.
type Group struct {
	Name  string `yaml:"name"`
	Rules []Rule `yaml:"rules"`
}

// Rule is a recording rule (Record set) or an alerting rule (Alert set).
type Rule struct {
	Record      string            `yaml:"record,omitempty"`
	Alert       string            `yaml:"alert,omitempty"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for,omitempty"`
	Labels      map[string]string `yaml:"labels,omitempty"`
	Annotations map[string]string `yaml:"annotations,omitempty"`
}

// Skipped is a burn-rate pair left out for a class because its threshold,
// Factor × budget, is 1 or more: an error ratio never exceeds 1, so the
// alert could never fire (the workbook's factors assume targets near 99.9%).
type Skipped struct {
	Class     string
	Pair      BurnRate
	Threshold float64
}

func (s Skipped) String() string {
	budget := s.Threshold / s.Pair.Factor
	return fmt.Sprintf("class %s: no %s/%s burn-rate alert: %s × budget %s = %s ≥ 1 can never fire (attainment_target %s)",
		s.Class, s.Pair.Long, s.Pair.Short, num(s.Pair.Factor), num(budget), num(s.Threshold), num(1-budget))
}

// Names of the recorded series. Level:metric:operations, as Prometheus's
// recording-rule naming practice has it.
func RecRequests(w string) string   { return "llmesh_class:requests:rate" + w }
func RecGood(w string) string       { return "llmesh_class:slo_good:rate" + w }
func RecErrorRatio(w string) string { return "llmesh_class:slo_error:ratio_rate" + w }
func RecAttainment(w string) string { return "llmesh_class:slo_attainment:ratio_rate" + w }
func RecQuantile(m string, q int) string {
	return "llmesh_class:" + m + ":p" + strconv.Itoa(q) + "_5m"
}

const (
	RecModelRequests   = "llmesh_class_model:requests:rate5m"
	RecModelAttainment = "llmesh_class_model:slo_attainment:ratio_rate5m"
	RecViolations      = "llmesh_class_slo:violations:rate5m"
	RecFailed          = "llmesh_class:failed:rate5m"
	RecPreemptions     = "llmesh_class:preemptions:rate5m"
	RecEngineRecompute = "llmesh_engine:preemptions:rate5m"
	RecPoolLimit       = "llmesh_pool:limit:sum"
	RecPoolInflight    = "llmesh_pool:inflight:sum"
	RecPoolQueued      = "llmesh_pool:queued:sum"
	RecPoolUtilisation = "llmesh_pool:utilisation:ratio"

	AlertBurn           = "LLMeshErrorBudgetBurn"
	AlertPoolSaturated  = "LLMeshPoolSaturated"
	AlertPreemptNothing = "LLMeshPreemptionFreesNothing"
	AlertSchedulerDown  = "LLMeshSchedulerServiceDown"
	defaultSchedulerJob = "llmesh-scheduler"
	quantileMetricTTFT  = "ttft_seconds"
	quantileMetricTPOT  = "tpot_seconds"
	quantileMetricQueue = "queue_seconds"
)

// Quantiles are the percentiles recorded for TTFT, TPOT and queue time.
var Quantiles = []int{50, 90, 99}

// QuantileMetrics maps the recorded quantile names to their histograms.
var QuantileMetrics = []struct{ Name, Histogram string }{
	{quantileMetricTTFT, MetricTTFT},
	{quantileMetricTPOT, MetricTPOT},
	{quantileMetricQueue, MetricQueue},
}

// Rules builds the rule file for cfg: recording rules for every class and
// pool, burn-rate alerts per class from its attainment_target, and the
// capacity alerts. Pairs that could never fire are returned as skipped.
func Rules(cfg *config.Config, o Options) (*RuleFile, []Skipped) {
	job := o.SchedulerJob
	if job == "" {
		job = defaultSchedulerJob
	}
	var rec []Rule
	add := func(name, expr string) { rec = append(rec, Rule{Record: name, Expr: expr}) }
	for _, w := range Windows {
		add(RecRequests(w), fmt.Sprintf("sum by (%s) (rate(%s[%s]))", LabelClass, MetricRequests, w))
		add(RecGood(w), fmt.Sprintf(`sum by (%s) (rate(%s{llmesh_slo_met="true"}[%s]))`, LabelClass, MetricRequests, w))
	}
	for _, w := range Windows {
		// 0/0 (no traffic in the window) is NaN: no alert compares true.
		add(RecAttainment(w), fmt.Sprintf("%s / %s", RecGood(w), RecRequests(w)))
		add(RecErrorRatio(w), fmt.Sprintf("1 - %s / %s", RecGood(w), RecRequests(w)))
	}
	add(RecModelRequests, fmt.Sprintf("sum by (%s, %s) (rate(%s[5m]))", LabelClass, LabelModel, MetricRequests))
	add(RecModelAttainment, fmt.Sprintf(`sum by (%s, %s) (rate(%s{llmesh_slo_met="true"}[5m])) / %s`, LabelClass, LabelModel, MetricRequests, RecModelRequests))
	for _, m := range QuantileMetrics {
		for _, q := range Quantiles {
			add(RecQuantile(m.Name, q), fmt.Sprintf("histogram_quantile(%s, sum by (%s, le) (rate(%s_bucket[5m])))", quantile(q), LabelClass, m.Histogram))
		}
	}
	add(RecViolations, fmt.Sprintf("sum by (%s, llmesh_slo) (rate(%s[5m]))", LabelClass, MetricViolations))
	add(RecFailed, fmt.Sprintf(`sum by (%s) (rate(%s{llmesh_outcome!="ok"}[5m]))`, LabelClass, MetricRequests))
	add(RecPreemptions, fmt.Sprintf("sum by (%s) (rate(%s[5m]))", LabelClass, MetricPreemptions))
	add(RecEngineRecompute, fmt.Sprintf(`sum by (job, instance) (rate({__name__=%q}[5m]))`, MetricEnginePreemptions))
	add(RecPoolLimit, fmt.Sprintf("sum by (%s) (%s)", LabelPool, MetricLimit))
	add(RecPoolInflight, fmt.Sprintf("sum by (%s) (%s)", LabelPool, MetricInflight))
	add(RecPoolQueued, fmt.Sprintf("sum by (%s) (%s)", LabelPool, MetricQueued))
	add(RecPoolUtilisation, fmt.Sprintf("%s / %s", RecPoolInflight, RecPoolLimit))

	var alerts []Rule
	var skipped []Skipped
	for _, c := range cfg.Classes {
		budget := 1 - c.AttainmentTarget
		for _, br := range BurnRates {
			th := br.Factor * budget
			if th >= 1 {
				skipped = append(skipped, Skipped{Class: c.Name, Pair: br, Threshold: th})
				continue
			}
			sel := fmt.Sprintf("{%s=%q}", LabelClass, c.Name)
			alerts = append(alerts, Rule{
				Alert: AlertBurn,
				Expr: fmt.Sprintf("%s%s > %s and %s%s > %s",
					RecErrorRatio(br.Long), sel, num(th), RecErrorRatio(br.Short), sel, num(th)),
				Labels: map[string]string{
					LabelClass: c.Name, "severity": br.Severity, "long_window": br.Long, "short_window": br.Short,
				},
				Annotations: map[string]string{
					"summary": fmt.Sprintf("class %s missed its SLO on {{ $value | humanizePercentage }} of requests over %s", c.Name, br.Long),
					"description": fmt.Sprintf("Class %s burns its error budget at more than %s× over %s and %s: over both windows more than %s of its requests missed "+
						"TTFT ≤ %s or TPOT ≤ %s or failed, against a budget of %s (attainment_target %s).",
						c.Name, num(br.Factor), br.Long, br.Short, pct(th), orNone(c.TTFT.String(), c.TTFT == 0), orNone(c.TPOT.String(), c.TPOT == 0), pct(budget), num(c.AttainmentTarget)),
				},
			})
		}
	}
	alerts = append(alerts,
		Rule{
			Alert: AlertPoolSaturated,
			// The queue first, so $value is the number waiting.
			Expr: fmt.Sprintf("%s > 0 and %s >= %s and delta(%s[10m]) > 0",
				RecPoolQueued, RecPoolInflight, RecPoolLimit, RecPoolQueued),
			For:    "5m",
			Labels: map[string]string{"severity": "ticket"},
			Annotations: map[string]string{
				"summary":     "pool {{ $labels.pool }} is at its capacity limit and its queue keeps growing",
				"description": "Every admission slot of pool {{ $labels.pool }} has been taken for 5 minutes while its queue grew over the last 10 minutes ({{ $value }} waiting): the engine's capacity is too small for the offered load, or its learned limit dropped.",
			},
		},
		Rule{
			Alert:  AlertPreemptNothing,
			Expr:   fmt.Sprintf("max by (%s) (%s) == 1", LabelPool, MetricAbortUnhonoured),
			For:    "5m",
			Labels: map[string]string{"severity": "ticket"},
			Annotations: map[string]string{
				"summary":     "preemptions on pool {{ $labels.pool }} free no engine capacity",
				"description": "The engine behind pool {{ $labels.pool }} does not honour aborts: a preempted request keeps running there, so preemption delays the victim without making room for the urgent request.",
			},
		})
	if cfg.SchedulerService != nil {
		alerts = append(alerts, Rule{
			Alert:  AlertSchedulerDown,
			Expr:   fmt.Sprintf("up{job=%q} == 0 or absent(up{job=%q})", job, job),
			For:    "1m",
			Labels: map[string]string{"severity": "page"},
			Annotations: map[string]string{
				"summary": fmt.Sprintf("the shared scheduler service (%s) is down", cfg.SchedulerService.Address),
				"description": fmt.Sprintf("Prometheus cannot scrape job %s. With scheduler_service.failure_mode %s, hosts %s.",
					job, map[bool]string{true: "fail_open", false: "fail_closed"}[cfg.SchedulerService.FailOpen],
					map[bool]string{true: "admit without the shared ordering (the gateway falls back to its in-process scheduler)", false: "reject the requests that need admission"}[cfg.SchedulerService.FailOpen]),
			},
		})
	}
	// One group: its rules run in order at each evaluation, so the alerts
	// read the ratios recorded the same instant, not the previous ones.
	return &RuleFile{Groups: []Group{{Name: "llmesh-slo", Rules: append(rec, alerts...)}}}, skipped
}

// Marshal writes f as YAML, with header lines as comments on top.
func (f *RuleFile) Marshal(header string) ([]byte, error) {
	var b bytes.Buffer
	for _, l := range strings.Split(strings.TrimRight(header, "\n"), "\n") {
		if l == "" {
			b.WriteString("#\n")
			continue
		}
		b.WriteString("# " + l + "\n")
	}
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(f); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func quantile(q int) string { return strconv.FormatFloat(float64(q)/100, 'f', -1, 64) }

// num formats a threshold without float noise (14.4 × 0.05 = 0.72, not
// 0.7200000000000001).
func num(v float64) string { return strconv.FormatFloat(v, 'g', 6, 64) }

func pct(v float64) string { return strconv.FormatFloat(100*v, 'g', 4, 64) + "%" }

func orNone(s string, none bool) string {
	if none {
		return "none"
	}
	return s
}

// GenerateRules is the rule file for cfg as written by `llmesh slo rules`:
// a header naming the command and source that regenerate it and every
// skipped pair, then the YAML.
func GenerateRules(cfg *config.Config, source string, o Options) ([]byte, []Skipped, error) {
	f, skipped := Rules(cfg, o)
	h := "llmesh SLO recording rules and alerts, generated from " + source + " by\n" +
		"  llmesh slo rules --config " + source + "\n" +
		"Do not edit: change the mesh config's classes and regenerate. Reference: docs/slo.md.\n"
	for _, s := range skipped {
		h += s.String() + "\n"
	}
	b, err := f.Marshal(h)
	return b, skipped, err
}
