package simulate

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"text/tabwriter"

	"github.com/llmesh/llmesh/bench/report"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/policy"
)

// Comparison is one row of the policy comparison: the most urgent class's
// P99 TTFT against the same policy's lowest load, and the other classes'
// goodput against the best policy that never preempts at the same load.
type Comparison struct {
	Policy string  `json:"policy"`
	Load   float64 `json:"load"`
	// UrgentClass is the class with the lowest priority value.
	UrgentClass   string  `json:"urgent_class"`
	UrgentP99TTFT float64 `json:"urgent_p99_ttft_ms"`
	// UrgentRatio is UrgentP99TTFT over the same policy's value at the
	// lowest load evaluated (0 when only one load was run).
	UrgentRatio float64 `json:"urgent_p99_ttft_ratio"`
	// FloorRatio is UrgentP99TTFT over the admission floor at this load
	// (Result.Floor; 0 when not measured).
	FloorRatio float64 `json:"urgent_p99_ttft_floor_ratio"`
	// OtherGoodputRPS sums the goodput of every other class;
	// OtherGoodputRel relates it to the best non-preemptive policy's at
	// this load (0 when none ran).
	OtherGoodputRPS float64 `json:"other_goodput_rps"`
	OtherGoodputRel float64 `json:"other_goodput_rel"`
	// OtherTokensRel does the same for their output tokens per second.
	OtherTokensRel       float64 `json:"other_output_tokens_rel"`
	RecomputedOfOutput   float64 `json:"recomputed_of_output"`
	RecomputedOfComputed float64 `json:"recomputed_of_computed"`
	Preemptions          int     `json:"preemptions"`
	// UrgentQueueP99 and UrgentUpstreamP99 split the urgent class's TTFT:
	// waiting for admission, and admission to first token.
	UrgentQueueP99    float64 `json:"urgent_queue_p99_ms"`
	UrgentUpstreamP99 float64 `json:"urgent_upstream_p99_ms"`
}

// Compare builds the comparison rows of r, in run order.
func (r *Result) Compare() []Comparison {
	if len(r.Runs) == 0 {
		return nil
	}
	urgent := ""
	best := math.MaxInt
	for name, c := range r.Runs[0].Classes {
		if c.Priority < best || (c.Priority == best && name < urgent) {
			urgent, best = name, c.Priority
		}
	}
	lowest := map[string]*Run{}
	type agg struct{ goodput, tokens float64 }
	others := make([]agg, len(r.Runs))
	bestNP := map[float64]agg{}
	for i, run := range r.Runs {
		if l, ok := lowest[run.Policy]; !ok || run.Load < l.Load {
			lowest[run.Policy] = run
		}
		for name, c := range run.Classes {
			if name != urgent {
				others[i].goodput += c.GoodputRPS
				others[i].tokens += c.OutputTokensPerS
			}
		}
		if p, err := policy.Lookup(run.Policy); err == nil && !scheduler.Preempts(p) {
			b := bestNP[run.Load]
			bestNP[run.Load] = agg{max(b.goodput, others[i].goodput), max(b.tokens, others[i].tokens)}
		}
	}
	var out []Comparison
	for i, run := range r.Runs {
		c := Comparison{Policy: run.Policy, Load: run.Load, UrgentClass: urgent,
			RecomputedOfOutput: run.RecomputedTokensFraction, RecomputedOfComputed: run.Sim.RecomputedOfComputed,
			Preemptions: run.Sim.Preemptions, OtherGoodputRPS: others[i].goodput}
		if b, ok := run.Sim.Breakdown[urgent]; ok {
			c.UrgentQueueP99, c.UrgentUpstreamP99 = b.QueueMs.P99, b.UpstreamMs.P99
		}
		if u := run.Classes[urgent]; u != nil {
			c.UrgentP99TTFT = u.TTFTMs.P99
			if base := lowest[run.Policy].Classes[urgent]; base != nil && base.TTFTMs.P99 > 0 && lowest[run.Policy] != run {
				c.UrgentRatio = c.UrgentP99TTFT / base.TTFTMs.P99
			}
		}
		if f := r.Floor[loadKey(run.Load)]; f != nil && f.UrgentP99TTFT > 0 {
			c.FloorRatio = c.UrgentP99TTFT / f.UrgentP99TTFT
		}
		if b, ok := bestNP[run.Load]; ok {
			if b.goodput > 0 {
				c.OtherGoodputRel = others[i].goodput / b.goodput
			}
			if b.tokens > 0 {
				c.OtherTokensRel = others[i].tokens / b.tokens
			}
		}
		out = append(out, c)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Load != out[j].Load {
			return out[i].Load < out[j].Load
		}
		return false
	})
	return out
}

// jsonResult is Result with the comparison added.
type jsonResult struct {
	*Result
	Comparison []Comparison `json:"comparison"`
}

// WriteJSON writes r and its comparison as one JSON object.
func WriteJSON(w io.Writer, r *Result) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(jsonResult{r, r.Compare()})
}

// WriteText writes the saturation point, each run's report in the format
// of `llmesh bench run` (unless brief), and the comparison table.
func WriteText(w io.Writer, r *Result, brief bool) error {
	ew := &errWriter{w: w}
	fmt.Fprintf(ew, "workload %s on %s (max_num_seqs %d, max_num_batched_tokens %d, ", r.Workload, r.Profile, r.Engine.MaxNumSeqs, r.Engine.MaxNumBatchedTokens)
	if r.Engine.LongPrefillTokenThreshold > 0 {
		fmt.Fprintf(ew, "long_prefill_token_threshold %d, ", r.Engine.LongPrefillTokenThreshold)
	}
	fmt.Fprintf(ew, "kv %d tokens, %s); pool max_inflight %d", r.Engine.KVCacheTokens, r.Engine.Policy, r.Pool.MaxInflight)
	if r.Pool.MetricsIntervalMs > 0 {
		fmt.Fprintf(ew, ", limit from engine load every %gms", r.Pool.MetricsIntervalMs)
	}
	if r.Engines > 1 || r.Proxies > 1 || r.HopMs > 0 {
		layout := "sharing one scheduler"
		if r.Schedulers == SchedulersPerProxy {
			layout = "each with its own scheduler and its share of every limit"
		}
		fmt.Fprintf(ew, "\nfleet: %d engines behind %d proxies %s, routing %s, hop %gms; pool options per engine", r.Engines, r.Proxies, layout, r.Routing, r.HopMs)
	}
	fmt.Fprintf(ew, "\nsaturation: %.2f req/s (%.0f output tok/s), measured over %.1f s of a %d-request backlog\n\n",
		r.Saturation.RPS, r.Saturation.OutputTokensPerS, r.Saturation.WindowS, r.Saturation.Requests)
	if !brief {
		for _, run := range r.Runs {
			fmt.Fprintf(ew, "== %s at load %g (%.2f req/s) ==\n", run.Policy, run.Load, run.ArrivalRPS)
			if err := report.Table(ew, run.Report); err != nil {
				return err
			}
			s := run.Sim
			fmt.Fprintf(ew, "simulation: %d preemptions (%d requeued, %d continued, %d finished first); recomputed %d tokens = %.2f%% of computed; engine KV preemptions %d; min pool limit %d; %.1f s virtual\n\n",
				s.Preemptions, s.Requeues, s.Continuations, s.LateFinishes, s.RecomputedTokens, 100*s.RecomputedOfComputed, s.EnginePreemptions, s.MinPoolLimit, s.VirtualSeconds)
			if line := prefixLine(run.PrefixCache); line != "" {
				fmt.Fprintln(ew, line)
			}
			if line := routedLine(run.PrefixCache); line != "" {
				fmt.Fprintln(ew, line)
			}
		}
	}
	cmp := r.Compare()
	if len(cmp) > 0 {
		tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "load\tpolicy\t%s p99 TTFT ms\tvs lowest load\t× floor\tother goodput req/s\tvs best non-preemptive\tother tok/s vs best\trecomputed/output\trecomputed/computed\tpreemptions\tqueue p99\tadmit→1st token p99\t\n", cmp[0].UrgentClass)
		lastLoad := math.NaN()
		for _, c := range cmp {
			if f := r.Floor[loadKey(c.Load)]; f != nil && c.Load != lastLoad {
				fmt.Fprintf(tw, "%.3g\t(floor)\t%.1f\t\t1.00x\t\t\t\t\t\t\t%.1f\t\t\n", c.Load, f.UrgentP99TTFT, f.UrgentQueueP99)
			}
			lastLoad = c.Load
			fmt.Fprintf(tw, "%.3g\t%s\t%.1f\t%s\t%s\t%.2f\t%s\t%s\t%.2f%%\t%.2f%%\t%d\t%.1f\t%.1f\t\n", c.Load, c.Policy, c.UrgentP99TTFT, ratio(c.UrgentRatio, "x"), ratio(c.FloorRatio, "x"),
				c.OtherGoodputRPS, ratio(c.OtherGoodputRel, "%"), ratio(c.OtherTokensRel, "%"), 100*c.RecomputedOfOutput, 100*c.RecomputedOfComputed, c.Preemptions, c.UrgentQueueP99, c.UrgentUpstreamP99)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if r.Engines > 1 {
		if err := writeEndpoints(ew, r); err != nil {
			return err
		}
	}
	return ew.err
}

// writeEndpoints is the fleet's table: per run, how evenly the engines
// were used.
func writeEndpoints(w io.Writer, r *Result) error {
	fmt.Fprintf(w, "\nengines (%d, routing %s): completed tokens max/mean, busy share, KV peak and running peak over the engines\n", r.Engines, r.Routing)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "load\tpolicy\timbalance\tbusy min\tbusy max\tKV peak max\trunning peak max\ttokens min\ttokens max\t\n")
	for _, run := range r.Runs {
		es := run.Sim.Endpoints
		if len(es) == 0 {
			continue
		}
		bmin, bmax, kv, rp := math.Inf(1), 0.0, 0.0, 0
		tmin, tmax := int64(math.MaxInt64), int64(0)
		for _, e := range es {
			bmin, bmax = min(bmin, e.BusyFraction), max(bmax, e.BusyFraction)
			kv, rp = max(kv, e.KVPeak), max(rp, e.RunningPeak)
			tmin, tmax = min(tmin, e.CompletedTokens), max(tmax, e.CompletedTokens)
		}
		fmt.Fprintf(tw, "%.3g\t%s\t%.3f\t%.1f%%\t%.1f%%\t%.1f%%\t%d\t%d\t%d\t\n", run.Load, run.Policy, run.Sim.Imbalance, 100*bmin, 100*bmax, 100*kv, rp, tmin, tmax)
	}
	return tw.Flush()
}

func ratio(v float64, unit string) string {
	switch {
	case v == 0:
		return "-"
	case unit == "%":
		return fmt.Sprintf("%.1f%%", 100*v)
	}
	return fmt.Sprintf("%.2fx", v)
}

// errWriter keeps the first write error so the renderer checks once.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return len(p), nil
	}
	_, e.err = e.w.Write(p)
	return len(p), nil
}
