// Package sweep runs a workload at a series of rates and finds, per class,
// the knee (the rate where its P99 TTFT or TPOT crosses the class SLO) and
// the highest goodput reached while every class meets its attainment
// target.
package sweep

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/llmesh/llmesh/bench/harness"
	"github.com/llmesh/llmesh/bench/result"
	"github.com/llmesh/llmesh/bench/workload"
)

// Options configure Sweep.
type Options struct {
	// Workload is scaled to each rate; required.
	Workload *workload.Workload
	// Target is the endpoint; required.
	Target string
	// Rates are offered loads: requests/s for open loops, client counts
	// for closed loops, speed-up factors for trace replay. Sorted
	// ascending before running.
	Rates []float64
	// Progress, when a terminal, shows each run's progress; Log gets one
	// line per finished run.
	Progress io.Writer
	Log      io.Writer
	// Run performs one run; nil means harness.Run.
	Run func(context.Context, harness.Options) (*result.Report, []result.Record, error)
	// JSONL, when not nil, gets every run's per-request records, each
	// with its Run set to "rate=R".
	JSONL io.Writer
}

// Point is one rate's outcome.
type Point struct {
	Rate          float64                `json:"rate"`
	AchievedRPS   float64                `json:"achieved_rps"`
	Valid         bool                   `json:"valid"`
	GoodputRPS    float64                `json:"goodput_rps"`
	AllMeetTarget bool                   `json:"all_meet_target"`
	Classes       map[string]*PointClass `json:"classes"`
}

// PointClass is one class at one rate.
type PointClass struct {
	TTFTP99Ms     float64 `json:"ttft_p99_ms"`
	TPOTP99Ms     float64 `json:"tpot_p99_ms"`
	SLOAttainment float64 `json:"slo_attainment"`
	GoodputRPS    float64 `json:"goodput_rps"`
	// WithinSLO is P99 TTFT ≤ TTFT SLO and P99 TPOT ≤ TPOT SLO.
	WithinSLO   bool `json:"within_slo"`
	MeetsTarget bool `json:"meets_target"`
}

// Knee is where a class's P99 first crosses its SLO.
type Knee struct {
	// Found is false when the class stayed within its SLO at every rate
	// (LastGood is then the highest rate) or was over it at the first.
	Found bool `json:"found"`
	// LastGood is the highest rate below the first crossing; FirstBad the
	// first rate over the SLO; Estimate interpolates the crossing rate
	// linearly on the violating metric.
	LastGood float64 `json:"last_good"`
	FirstBad float64 `json:"first_bad"`
	Estimate float64 `json:"estimate"`
	// Metric is ttft_p99 or tpot_p99, whichever crossed.
	Metric string `json:"metric,omitempty"`
}

// Result is a sweep.
type Result struct {
	Workload string          `json:"workload"`
	Target   string          `json:"target"`
	Points   []Point         `json:"points"`
	Knees    map[string]Knee `json:"knees"`
	// MaxGoodputRate and MaxGoodputRPS are the rate with the highest total
	// goodput among points where every class met its attainment target
	// (zero when none did).
	MaxGoodputRate float64          `json:"max_goodput_rate"`
	MaxGoodputRPS  float64          `json:"max_goodput_rps"`
	Reports        []*result.Report `json:"reports"`
}

// Sweep runs the workload at each rate. When ctx ends early or a run fails
// it returns the points so far, with the error.
func Sweep(ctx context.Context, o Options) (*Result, error) {
	if o.Workload == nil || o.Target == "" || len(o.Rates) == 0 {
		return nil, errors.New("sweep: Workload, Target and Rates are required")
	}
	for i, r := range o.Rates {
		if !(r > 0) {
			return nil, fmt.Errorf("rates[%d]: %g must be positive", i, r)
		}
	}
	run := o.Run
	if run == nil {
		run = harness.Run
	}
	rates := append([]float64(nil), o.Rates...)
	sort.Float64s(rates)
	base := baseRate(o.Workload)
	res := &Result{Workload: o.Workload.Spec.Name, Target: o.Target, Knees: map[string]Knee{}}
	var runErr error
	for _, rate := range rates {
		w := o.Workload.ScaleRate(rate / base)
		rep, _, err := run(ctx, harness.Options{Workload: w, Target: o.Target, Label: fmt.Sprintf("rate %g", rate), Load: rate, Progress: o.Progress,
			JSONL: o.JSONL, RunID: fmt.Sprintf("rate=%g", rate)})
		if rep != nil {
			res.Reports = append(res.Reports, rep)
			res.Points = append(res.Points, point(rate, rep))
			if o.Log != nil {
				fmt.Fprintf(o.Log, "sweep: rate %g: achieved %.2f req/s, goodput %.2f req/s\n", rate, rep.AchievedRPS, rep.RequestGoodput)
			}
		}
		if err != nil {
			runErr = fmt.Errorf("rate %g: %w", rate, err)
			break
		}
	}
	analyze(res, o.Workload)
	return res, runErr
}

func baseRate(w *workload.Workload) float64 {
	switch w.Spec.Arrival.Process {
	case workload.ArrivalClosed:
		return float64(w.Spec.Arrival.Concurrency)
	case workload.ArrivalTrace:
		return 1
	}
	return w.RequestRate()
}

func point(rate float64, rep *result.Report) Point {
	p := Point{Rate: rate, AchievedRPS: rep.AchievedRPS, Valid: rep.Valid, GoodputRPS: rep.RequestGoodput, AllMeetTarget: true, Classes: map[string]*PointClass{}}
	for name, c := range rep.Classes {
		pc := &PointClass{TTFTP99Ms: c.TTFTMs.P99, TPOTP99Ms: c.TPOTMs.P99, SLOAttainment: c.SLOAttainment, GoodputRPS: c.GoodputRPS, MeetsTarget: c.MeetsTarget}
		pc.WithinSLO = (c.SLOTTFTMs == 0 || (c.TTFTMs.N > 0 && c.TTFTMs.P99 <= c.SLOTTFTMs)) && (c.SLOTPOTMs == 0 || c.TPOTMs.P99 <= c.SLOTPOTMs)
		p.Classes[name] = pc
		if !c.MeetsTarget {
			p.AllMeetTarget = false
		}
	}
	return p
}

func analyze(res *Result, w *workload.Workload) {
	for _, c := range w.Classes {
		k := Knee{}
		for i, p := range res.Points {
			pc := p.Classes[c.Name]
			if pc == nil {
				continue
			}
			if pc.WithinSLO {
				k.LastGood = p.Rate
				continue
			}
			k.FirstBad = p.Rate
			k.Found = i > 0
			k.Metric, k.Estimate = crossing(res.Points, i, c)
			break
		}
		res.Knees[c.Name] = k
	}
	for _, p := range res.Points {
		if p.AllMeetTarget && p.Valid && p.GoodputRPS > res.MaxGoodputRPS {
			res.MaxGoodputRPS, res.MaxGoodputRate = p.GoodputRPS, p.Rate
		}
	}
}

// crossing interpolates where the violating metric reached the SLO
// between points i−1 and i.
func crossing(pts []Point, i int, c workload.Class) (string, float64) {
	cur := pts[i].Classes[c.Name]
	metric, slo, y1 := "ttft_p99", float64(c.TTFT)/1e6, cur.TTFTP99Ms
	if c.TTFT == 0 || cur.TTFTP99Ms <= float64(c.TTFT)/1e6 {
		metric, slo, y1 = "tpot_p99", float64(c.TPOT)/1e6, cur.TPOTP99Ms
	}
	if i == 0 {
		return metric, 0
	}
	prev := pts[i-1].Classes[c.Name]
	y0 := prev.TTFTP99Ms
	if metric == "tpot_p99" {
		y0 = prev.TPOTP99Ms
	}
	x0, x1 := pts[i-1].Rate, pts[i].Rate
	if y1 <= y0 {
		return metric, x1
	}
	return metric, x0 + (slo-y0)/(y1-y0)*(x1-x0)
}

// Table writes the sweep as a terminal table.
func Table(w io.Writer, r *Result) error {
	names := classNames(r)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	hdr := []string{"rate", "achieved", "goodput", "valid"}
	for _, n := range names {
		hdr = append(hdr, n+" ttft p99", n+" tpot p99", n+" attain")
	}
	fmt.Fprintln(tw, strings.Join(hdr, "\t")+"\t")
	for _, p := range r.Points {
		row := []string{fmt.Sprintf("%g", p.Rate), fmt.Sprintf("%.2f", p.AchievedRPS), fmt.Sprintf("%.2f", p.GoodputRPS), fmt.Sprint(p.Valid)}
		for _, n := range names {
			if c := p.Classes[n]; c != nil {
				mark := ""
				if !c.WithinSLO {
					mark = "*"
				}
				row = append(row, fmt.Sprintf("%.1f%s", c.TTFTP99Ms, mark), fmt.Sprintf("%.1f", c.TPOTP99Ms), fmt.Sprintf("%.1f%%", 100*c.SLOAttainment))
			} else {
				row = append(row, "-", "-", "-")
			}
		}
		fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "* = P99 over the class SLO")
	for _, l := range summary(r) {
		if _, err := fmt.Fprintln(w, l); err != nil {
			return err
		}
	}
	return nil
}

// summary is the sweep's findings, one line each: every class's knee, then
// the highest goodput with every class at its attainment target.
func summary(r *Result) []string {
	var out []string
	for _, n := range classNames(r) {
		k := r.Knees[n]
		switch {
		case k.Found:
			out = append(out, fmt.Sprintf("knee %s: %s crosses its SLO between %g and %g (≈ %.3g)", n, k.Metric, k.LastGood, k.FirstBad, k.Estimate))
		case k.FirstBad > 0:
			out = append(out, fmt.Sprintf("knee %s: over its SLO already at the lowest rate %g", n, k.FirstBad))
		default:
			out = append(out, fmt.Sprintf("knee %s: within its SLO up to the highest rate %g", n, k.LastGood))
		}
	}
	if r.MaxGoodputRPS > 0 {
		return append(out, fmt.Sprintf("max goodput with every class at its attainment target: %.2f req/s at rate %g", r.MaxGoodputRPS, r.MaxGoodputRate))
	}
	return append(out, "no rate met every class's attainment target")
}

// classNames are the swept classes in name order.
func classNames(r *Result) []string {
	var names []string
	for n := range r.Knees {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
