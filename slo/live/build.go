package live

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"time"

	"github.com/llmesh/llmesh/bench/result"
	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/slo"
)

// Options select the window of a report.
type Options struct {
	// End is the window's end; zero means now.
	End time.Time
	// Window is its length, at least a minute.
	Window time.Duration
	// Prometheus and Config are recorded in the report's Live section.
	Prometheus, Config string
	// WorstHours is how many hours Build lists per class; 0 means 3.
	WorstHours int
}

// Note is the exactness statement every live report carries.
const Note = "Counts are the change of each counter over the window, exact while no host restarted in it " +
	"(a series that reset falls back to Prometheus's extrapolated increase()); a series that appeared in the " +
	"window counts from zero. Attainment uses each request's own verdict at the proxy (llmesh_requests_total" +
	"{llmesh_slo_met}), not the histograms. Percentiles are histogram_quantile over the window's bucket counts: " +
	"exact to the bucket that holds the rank (docs/metrics.md lists the bounds), linearly interpolated inside it."

// Increase is the change of the counter series S over the window w ending
// at the query time: S − S offset w per series, a series new in the window
// counting from zero; Prometheus's increase() (extrapolated) for a series
// that reset in the window or no longer exists at its end.
func Increase(s, w string) string {
	return fmt.Sprintf("((%[1]s - ((%[1]s offset %[2]s) or (%[1]s * 0))) unless (resets(%[1]s[%[2]s]) > 0)) or increase(%[1]s[%[2]s])", s, w)
}

// quantiles reported per histogram, into Percentiles' fields.
var quantiles = []float64{0.5, 0.9, 0.95, 0.99}

// Build queries q for the window and returns the per-class report.
func Build(ctx context.Context, q Querier, cfg *config.Config, o Options) (*result.Report, error) {
	if o.Window < time.Minute {
		return nil, fmt.Errorf("window: %v must be at least 1m", o.Window)
	}
	end := o.End
	if end.IsZero() {
		end = time.Now()
	}
	end = end.Truncate(time.Millisecond).UTC()
	start := end.Add(-o.Window)
	w := strconv.FormatInt(int64(o.Window/time.Second), 10) + "s"
	secs := o.Window.Seconds()
	by := slo.LabelClass

	var errs []error
	query := func(expr string) []Sample {
		s, err := q.Query(ctx, expr, end)
		if err != nil {
			errs = append(errs, err)
		}
		return s
	}
	perClass := func(expr string) map[string]float64 {
		m := map[string]float64{}
		for _, s := range query(expr) {
			m[s.Labels[by]] += s.Value
		}
		return m
	}

	type counts struct{ total, ok, good, preempted float64 }
	cs := map[string]*counts{}
	for _, s := range query(fmt.Sprintf("sum by (%s, llmesh_outcome, llmesh_slo_met) (%s)", by, Increase(slo.MetricRequests, w))) {
		c := cs[s.Labels[by]]
		if c == nil {
			c = &counts{}
			cs[s.Labels[by]] = c
		}
		c.total += s.Value
		if s.Labels["llmesh_outcome"] == "ok" {
			c.ok += s.Value
		}
		if s.Labels["llmesh_outcome"] == "preempted" {
			c.preempted += s.Value
		}
		if s.Labels["llmesh_slo_met"] == "true" {
			c.good += s.Value
		}
	}
	viol := map[string]map[string]float64{}
	for _, s := range query(fmt.Sprintf("sum by (%s, llmesh_slo) (%s)", by, Increase(slo.MetricViolations, w))) {
		if viol[s.Labels[by]] == nil {
			viol[s.Labels[by]] = map[string]float64{}
		}
		viol[s.Labels[by]][s.Labels["llmesh_slo"]] += s.Value
	}
	preempt := perClass(fmt.Sprintf("sum by (%s) (%s)", by, Increase(slo.MetricPreemptions, w)))
	outTokens := perClass(fmt.Sprintf("sum by (%s) (%s)", by, Increase(slo.MetricTokens+`_sum{gen_ai_token_type="output"}`, w)))
	inTokens := perClass(fmt.Sprintf("sum by (%s) (%s)", by, Increase(slo.MetricTokens+`_sum{gen_ai_token_type="input"}`, w)))

	hist := func(metric string) map[string]*result.Percentiles {
		out := map[string]*result.Percentiles{}
		get := func(c string) *result.Percentiles {
			if out[c] == nil {
				out[c] = &result.Percentiles{}
			}
			return out[c]
		}
		// The overall row is the class label "": the same queries summed
		// over every class.
		n := perClass(fmt.Sprintf("sum by (%s) (%s)", by, Increase(metric+"_count", w)))
		sum := perClass(fmt.Sprintf("sum by (%s) (%s)", by, Increase(metric+"_sum", w)))
		for k, v := range perClass(fmt.Sprintf("sum(%s)", Increase(metric+"_count", w))) {
			n[k] = v
		}
		for k, v := range perClass(fmt.Sprintf("sum(%s)", Increase(metric+"_sum", w))) {
			sum[k] = v
		}
		for c, v := range n {
			p := get(c)
			p.N = int(math.Round(v))
			if v > 0 {
				p.Mean = 1000 * sum[c] / v
			}
		}
		for _, qv := range quantiles {
			vals := perClass(fmt.Sprintf("histogram_quantile(%g, sum by (%s, le) (%s))", qv, by, Increase(metric+"_bucket", w)))
			for k, v := range perClass(fmt.Sprintf("histogram_quantile(%g, sum by (le) (%s))", qv, Increase(metric+"_bucket", w))) {
				vals[k] = v
			}
			for c, v := range vals {
				if math.IsNaN(v) || math.IsInf(v, 0) {
					continue // no samples, or the rank is in the +Inf bucket
				}
				p := get(c)
				switch qv {
				case 0.5:
					p.P50 = 1000 * v
				case 0.9:
					p.P90 = 1000 * v
				case 0.95:
					p.P95 = 1000 * v
				case 0.99:
					p.P99 = 1000 * v
				}
			}
		}
		return out
	}
	ttft, tpot, e2e, queue, itl := hist(slo.MetricTTFT), hist(slo.MetricTPOT), hist(slo.MetricDuration), hist(slo.MetricQueue), hist(slo.MetricITL)
	worst, werr := worstHours(ctx, q, start, end, o.WorstHours)
	if werr != nil {
		errs = append(errs, werr)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}

	rep := &result.Report{
		Date:     end.Format(time.RFC3339),
		Backend:  "prometheus",
		Workload: "live",
		Target:   o.Prometheus,
		Protocol: "prometheus",
		Duration: secs,
		Valid:    true,
		Requests: map[result.Status]int{},
		Classes:  map[string]*result.ClassReport{},
		Live: &result.Live{Prometheus: o.Prometheus, Config: o.Config, Start: start.Format(time.RFC3339), End: end.Format(time.RFC3339),
			WindowS: secs, Note: Note},
	}
	all := &result.ClassReport{}
	var allGood, allOut float64
	for _, c := range cfg.Classes {
		k := cs[c.Name]
		if k == nil {
			k = &counts{}
		}
		cr := &result.ClassReport{
			Priority:         c.Priority,
			Requests:         int(math.Round(k.total)),
			Completed:        int(math.Round(k.ok)),
			SLOTTFTMs:        ms(c.TTFT),
			SLOTPOTMs:        ms(c.TPOT),
			AttainmentTarget: c.AttainmentTarget,
			ThroughputRPS:    k.total / secs,
			GoodputRPS:       k.good / secs,
			OutputTokensPerS: outTokens[c.Name] / secs,
			Preemptions:      int(math.Round(preempt[c.Name])),
			WorstHours:       worst[c.Name],
		}
		cr.Failed = cr.Requests - cr.Completed
		if k.total > 0 {
			cr.SLOAttainment = k.good / k.total
			miss := 1 - cr.SLOAttainment
			b := 1 - miss/(1-c.AttainmentTarget)
			if c.AttainmentTarget >= 1 {
				b = 1
				if miss > 0 {
					b = math.Inf(-1)
				}
			}
			if !math.IsInf(b, 0) {
				cr.BudgetRemaining = &b
			}
		}
		cr.MeetsTarget = k.total > 0 && cr.SLOAttainment >= c.AttainmentTarget
		v := viol[c.Name]
		cr.Violations = result.Violations{
			TTFT: int(math.Round(v["ttft"])), TPOT: int(math.Round(v["tpot"])),
			Error: int(math.Round(v["failed"] - k.preempted)), Preempted: int(math.Round(k.preempted)),
		}
		fillPercentiles(cr, c.Name, ttft, tpot, itl, e2e, queue)
		rep.Classes[c.Name] = cr
		if k.total > 0 {
			rep.Completed += cr.Completed
			rep.Failed += cr.Failed
			all.Requests += cr.Requests
			all.Completed += cr.Completed
			all.Failed += cr.Failed
			all.Preemptions += cr.Preemptions
			all.Violations.TTFT += cr.Violations.TTFT
			all.Violations.TPOT += cr.Violations.TPOT
			all.Violations.Error += cr.Violations.Error
			all.Violations.Preempted += cr.Violations.Preempted
			allGood += k.good
			allOut += outTokens[c.Name]
			rep.TotalInputTokens += int(math.Round(inTokens[c.Name]))
			rep.TotalOutputTokens += int(math.Round(outTokens[c.Name]))
		}
	}
	fillPercentiles(all, "", ttft, tpot, itl, e2e, queue)
	if all.Requests > 0 {
		all.SLOAttainment = allGood / float64(all.Requests)
	}
	all.ThroughputRPS = float64(all.Requests) / secs
	all.GoodputRPS = allGood / secs
	all.OutputTokensPerS = allOut / secs
	rep.Overall = all
	rep.NumPrompts = all.Requests
	rep.Requests[result.StatusOK] = rep.Completed
	if rep.Failed > 0 {
		rep.Requests[result.StatusError] = rep.Failed
	}
	rep.RequestThroughput = all.ThroughputRPS
	rep.OfferedRPS, rep.AchievedRPS = all.ThroughputRPS, all.ThroughputRPS
	rep.RequestGoodput = all.GoodputRPS
	rep.OutputThroughput = all.OutputTokensPerS
	return rep, nil
}

// worstHours ranks the window's hours (or the whole window when shorter)
// by attainment, per class, n of them (0: 3), worst first.
func worstHours(ctx context.Context, q Querier, start, end time.Time, n int) (map[string][]result.Interval, error) {
	if n <= 0 {
		n = 3
	}
	step := time.Hour
	if d := end.Sub(start); d < step {
		step = d
	}
	w := strconv.FormatInt(int64(step/time.Second), 10) + "s"
	by := slo.LabelClass
	good := fmt.Sprintf(`sum by (%s) (%s)`, by, Increase(slo.MetricRequests+`{llmesh_slo_met="true"}`, w))
	total := fmt.Sprintf(`sum by (%s) (%s)`, by, Increase(slo.MetricRequests, w))
	// Classes with requests but no good one have no good series: or 0.
	expr := fmt.Sprintf("(%s or (%s * 0)) / %s", good, total, total)
	tot, err := q.QueryRange(ctx, total, start.Add(step), end, step)
	if err != nil {
		return nil, err
	}
	att, err := q.QueryRange(ctx, expr, start.Add(step), end, step)
	if err != nil {
		return nil, err
	}
	reqs := map[string]map[int64]float64{}
	for _, s := range tot {
		m := map[int64]float64{}
		for _, p := range s.Points {
			m[p.T.Unix()] = p.V
		}
		reqs[s.Labels[by]] = m
	}
	out := map[string][]result.Interval{}
	for _, s := range att {
		c := s.Labels[by]
		var iv []result.Interval
		for _, p := range s.Points {
			if math.IsNaN(p.V) || reqs[c][p.T.Unix()] == 0 {
				continue
			}
			iv = append(iv, result.Interval{Start: p.T.Add(-step).Format(time.RFC3339), Requests: math.Round(reqs[c][p.T.Unix()]), Attainment: p.V})
		}
		sort.SliceStable(iv, func(i, j int) bool { return iv[i].Attainment < iv[j].Attainment })
		if len(iv) > n {
			iv = iv[:n]
		}
		out[c] = iv
	}
	return out, nil
}

func fillPercentiles(cr *result.ClassReport, class string, ttft, tpot, itl, e2e, queue map[string]*result.Percentiles) {
	for dst, src := range map[*result.Percentiles]map[string]*result.Percentiles{&cr.TTFTMs: ttft, &cr.TPOTMs: tpot, &cr.ITLMs: itl, &cr.E2EMs: e2e} {
		if p := src[class]; p != nil {
			*dst = *p
		}
	}
	if p := queue[class]; p != nil {
		cr.QueueMs = p
	}
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }
