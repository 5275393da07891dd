// Package report renders run reports: a terminal table, JSON (the result
// format, see bench/result), Markdown and a self-contained HTML page with
// inline SVG charts. Every renderer reads only the Report, so a saved JSON
// file re-renders into any format.
package report

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/llmesh/llmesh/bench/result"
)

// Formats lists the accepted format names.
var Formats = []string{"table", "json", "markdown", "html"}

// Render writes rep in format (table, json, markdown or html).
func Render(w io.Writer, rep *result.Report, format string) error {
	switch format {
	case "table", "text", "":
		return Table(w, rep)
	case "json":
		return WriteJSON(w, rep)
	case "markdown", "md":
		return Markdown(w, rep)
	case "html":
		return HTML(w, rep)
	}
	return fmt.Errorf("format: %q must be one of %s", format, strings.Join(Formats, ", "))
}

// WriteJSON writes the report as indented JSON.
func WriteJSON(w io.Writer, rep *result.Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// ReadJSON reads a report written by WriteJSON; it rejects documents that
// are not reports.
func ReadJSON(r io.Reader) (*result.Report, error) {
	var rep result.Report
	dec := json.NewDecoder(io.LimitReader(r, 1<<30))
	if err := dec.Decode(&rep); err != nil {
		return nil, fmt.Errorf("report: not a JSON report: %w", err)
	}
	if rep.Overall == nil || rep.Classes == nil {
		return nil, fmt.Errorf("report: JSON lacks \"overall\" and \"classes\": not an llmesh bench report")
	}
	for name, c := range rep.Classes {
		if c == nil {
			return nil, fmt.Errorf("report: classes.%s: is null", name)
		}
	}
	return &rep, nil
}

// ClassNames returns the report's classes by priority (most urgent first),
// then name.
func ClassNames(rep *result.Report) []string {
	names := make([]string, 0, len(rep.Classes))
	for n := range rep.Classes {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		a, b := rep.Classes[names[i]], rep.Classes[names[j]]
		if a.Priority != b.Priority {
			return a.Priority < b.Priority
		}
		return names[i] < names[j]
	})
	return names
}

// Title is the one-line description of a run.
func Title(rep *result.Report) string {
	s := fmt.Sprintf("%s → %s (%s)", rep.Workload, orDash(rep.Target), rep.Protocol)
	if rep.Policy != "" {
		s += " policy " + rep.Policy
	}
	if rep.Load != 0 {
		s += fmt.Sprintf(" load %.2f", rep.Load)
	}
	if rep.Label != "" {
		s += " [" + rep.Label + "]"
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// Validity is the verdict line on whether the run can be trusted.
func Validity(rep *result.Report) string {
	if l := rep.Live; l != nil {
		return fmt.Sprintf("live traffic from %s to %s (Prometheus %s, config %s)", l.Start, l.End, l.Prometheus, orDash(l.Config))
	}
	if rep.Valid {
		return fmt.Sprintf("valid (schedule lag p99 %.3f ms)", rep.ScheduleLagMs.P99)
	}
	return "INVALID: " + strings.Join(rep.InvalidReasons, "; ")
}

// Primary is the line naming the run's declared primary metrics
// (CLASS.METRIC, sorted) and where they came from; "" when none was
// declared.
func Primary(rep *result.Report) string {
	if len(rep.Primary) == 0 {
		return ""
	}
	ps := make([]string, 0, len(rep.Primary))
	for c, m := range rep.Primary {
		ps = append(ps, c+"."+m)
	}
	sort.Strings(ps)
	return fmt.Sprintf("primary metrics: %s (from %s)", strings.Join(ps, ", "), orDash(rep.PrimaryFrom))
}

func slo(ms float64) string {
	if ms == 0 {
		return "-"
	}
	return trim(ms)
}

func trim(ms float64) string {
	switch {
	case ms >= 100:
		return fmt.Sprintf("%.0f", ms)
	case ms >= 10:
		return fmt.Sprintf("%.1f", ms)
	}
	return fmt.Sprintf("%.2f", ms)
}

// row is one class line shared by the table and Markdown renderers.
func row(name string, c *result.ClassReport, overall bool) []string {
	prio := fmt.Sprint(c.Priority)
	if overall {
		prio = "-"
	}
	att := fmt.Sprintf("%.1f%%", 100*c.SLOAttainment)
	if c.AttainmentTarget > 0 {
		mark := "ok"
		if !c.MeetsTarget {
			mark = "MISS"
		}
		att += fmt.Sprintf(" (%.0f%% %s)", 100*c.AttainmentTarget, mark)
	}
	return []string{
		name, prio, fmt.Sprint(c.Requests), fmt.Sprint(c.Failed),
		trim(c.TTFTMs.P50), trim(c.TTFTMs.P99), slo(c.SLOTTFTMs),
		trim(c.TPOTMs.P50), trim(c.TPOTMs.P99), slo(c.SLOTPOTMs),
		trim(c.ITLMs.P99), trim(c.E2EMs.P99),
		att, fmt.Sprintf("%.2f", c.GoodputRPS), fmt.Sprintf("%.0f", c.OutputTokensPerS),
	}
}

var header = []string{"class", "prio", "reqs", "failed", "ttft p50", "ttft p99", "slo", "tpot p50", "tpot p99", "slo", "itl p99", "e2e p99", "attainment (target)", "goodput/s", "tok/s"}

func violations(c *result.ClassReport) string {
	v := c.Violations
	s := fmt.Sprintf("ttft %d, tpot %d, error %d, rejected %d, preempted %d", v.TTFT, v.TPOT, v.Error, v.Rejected, v.Preempted)
	if v.QueueFull > 0 {
		s += fmt.Sprintf(", queue full %d (refused by llmesh, not the engine)", v.QueueFull)
	}
	if v.TPOTUnknown > 0 {
		s += fmt.Sprintf(", tpot unknown %d (counted as misses)", v.TPOTUnknown)
	}
	return s
}

// tokenSources says where output token counts came from, when the
// engine's usage was not the only source.
func tokenSources(rep *result.Report) string {
	n := rep.OutputTokensSource[result.SourceStream]
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("output tokens: %d requests from the engine's usage, %d counted from the stream (the engine reported no usage, or 0)",
		rep.OutputTokensSource[result.SourceUsage], n)
}

func earlyStopping(c *result.ClassReport) string {
	var parts []string
	for _, e := range c.EarlyStopping {
		if e.Valid {
			parts = append(parts, fmt.Sprintf("%s p%g ≤ %s ms", e.Metric, e.Percentile, trim(e.BoundMs)))
		} else {
			parts = append(parts, fmt.Sprintf("%s p%g unsupported (%d/%d samples)", e.Metric, e.Percentile, e.N, e.MinSamples))
		}
	}
	return strings.Join(parts, "; ")
}

// prefixLines is the engines' prefix-cache line, when the run read them.
func prefixLines(rep *result.Report) []string {
	if p := rep.EnginePrefixCache; p != nil {
		pct := 0.0
		if p.QueriedTokens > 0 {
			pct = 100 * float64(p.HitTokens) / float64(p.QueriedTokens)
		}
		return []string{fmt.Sprintf("prefix cache (the engines' counters, %d engines, warm-up included): %d of %d queried tokens hit (%.1f%%)",
			p.Engines, p.HitTokens, p.QueriedTokens, pct)}
	}
	if rep.EnginePrefixCacheNote != "" {
		return []string{rep.EnginePrefixCacheNote}
	}
	return nil
}

func gpuLines(rep *result.Report) []string {
	if rep.GPU == nil || len(rep.GPU.Devices) == 0 {
		note := rep.GPUNote
		if note == "" {
			note = "no GPU telemetry"
		}
		return []string{note}
	}
	var out []string
	for _, d := range rep.GPU.Devices {
		out = append(out, fmt.Sprintf("GPU %d %s: SM util mean %.0f%% max %.0f%%, mem util mean %.0f%%, mem used max %.0f/%.0f MiB, power mean %.0f W max %.0f W, clocks SM %.0f MHz mem %.0f MHz (%d samples)",
			d.Index, d.Name, d.SMUtilMean, d.SMUtilMax, d.MemUtilMean, d.MemUsedMaxMiB, d.MemTotalMiB, d.PowerMeanW, d.PowerMaxW, d.SMClockMeanMHz, d.MemClockMeanMHz, d.Samples))
	}
	return out
}

// liveLines are the lines of a class's error budget, queue time and worst
// hours, those a report has (budget and worst hours: live reports of
// llmesh report slo only). withQueue false leaves the queue line to the
// caller.
func liveLines(c *result.ClassReport, withQueue bool) []string {
	var out []string
	if c.BudgetRemaining != nil {
		out = append(out, fmt.Sprintf("error budget remaining: %.1f%% (of %.1f%% of requests allowed to miss)", 100**c.BudgetRemaining, 100*(1-c.AttainmentTarget)))
	}
	if q := c.QueueMs; q != nil && withQueue {
		out = append(out, fmt.Sprintf("queue: p50 %s ms, p90 %s ms, p99 %s ms, mean %s ms; preemptions %d", trim(q.P50), trim(q.P90), trim(q.P99), trim(q.Mean), c.Preemptions))
	}
	if len(c.WorstHours) > 0 {
		var parts []string
		for _, h := range c.WorstHours {
			parts = append(parts, fmt.Sprintf("%s %.1f%% of %.0f", h.Start, 100*h.Attainment, h.Requests))
		}
		out = append(out, "worst hours: "+strings.Join(parts, "; "))
	}
	return out
}

// Table writes the terminal summary.
func Table(w io.Writer, rep *result.Report) error {
	ew := &errWriter{w: w}
	fmt.Fprintf(ew, "%s\n", Title(rep))
	fmt.Fprintf(ew, "%d requests (%d warm-up excluded) in %.2f s: %d ok, %d failed; offered %.2f req/s, achieved %.2f req/s; %.1f output tok/s; goodput %.2f req/s\n",
		rep.NumPrompts, rep.Warmup, rep.Duration, rep.Completed, rep.Failed, rep.OfferedRPS, rep.AchievedRPS, rep.OutputThroughput, rep.RequestGoodput)
	fmt.Fprintf(ew, "run: %s\n", Validity(rep))
	if p := Primary(rep); p != "" {
		fmt.Fprintln(ew, p)
	}
	fmt.Fprintln(ew)
	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, strings.Join(header, "\t")+"\t")
	for _, n := range ClassNames(rep) {
		fmt.Fprintln(tw, strings.Join(row(n, rep.Classes[n], false), "\t")+"\t")
	}
	fmt.Fprintln(tw, strings.Join(row("all", rep.Overall, true), "\t")+"\t")
	tw.Flush()
	fmt.Fprintln(ew, "\nlatencies in ms; attainment = share meeting both SLOs (failures count as misses)")
	for _, n := range ClassNames(rep) {
		c := rep.Classes[n]
		fmt.Fprintf(ew, "%s violations: %s\n", n, violations(c))
		if q := c.QueueMs; q != nil && rep.Live == nil {
			fmt.Fprintf(ew, "%s in llmesh (Server-Timing): queue p50 %s ms, p99 %s ms over %d requests; %d preemptions\n", n, trim(q.P50), trim(q.P99), q.N, c.Preemptions)
		}
		if es := earlyStopping(c); es != "" {
			fmt.Fprintf(ew, "%s early stopping (99%% confidence): %s\n", n, es)
		}
		for _, l := range liveLines(c, rep.Live != nil) {
			fmt.Fprintf(ew, "%s %s\n", n, l)
		}
	}
	if rep.Live != nil {
		fmt.Fprintf(ew, "note: %s\n", rep.Live.Note)
	}
	if rep.Engine != nil {
		fmt.Fprintf(ew, "engine agreement: client TTFT − engine TTFT over %d requests: p50 %s ms, p99 %s ms, max %s ms (%d negative); the difference is the time before the engine saw the request: network and harness, plus any queueing in a gateway or filter in front of it\n",
			rep.Engine.N, trim(rep.Engine.DeltaMs.P50), trim(rep.Engine.DeltaMs.P99), trim(rep.Engine.DeltaMs.Max), rep.Engine.NegativeN)
		if rep.Engine.Note != "" {
			fmt.Fprintf(ew, "engine agreement note: %s\n", rep.Engine.Note)
		}
	}
	if ts := tokenSources(rep); ts != "" {
		fmt.Fprintln(ew, ts)
	}
	if rep.RecomputedTokensFraction > 0 {
		fmt.Fprintf(ew, "recomputed tokens: %.2f%% of output\n", 100*rep.RecomputedTokensFraction)
	}
	for _, l := range append(prefixLines(rep), gpuLines(rep)...) {
		fmt.Fprintln(ew, l)
	}
	return ew.err
}

// errWriter keeps the first write error so renderers check once.
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
