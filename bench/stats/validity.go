package stats

import (
	"fmt"
	"math"

	"github.com/llmesh/llmesh/bench/result"
	"github.com/llmesh/llmesh/bench/workload"
)

// lagBudget is the schedule-lag p99 (ms) above which a run is invalid, and
// what it was derived from. The harness's lateness matters in proportion to
// what it could move: a request sent late arrives late, which distorts the
// arrival process (compare the mean inter-arrival gap) and the queueing that
// TTFT is made of (compare the smallest TTFT SLO and the smallest measured
// class TTFT P50). The budget is workload.Spec.ScheduleLagFraction of the
// smallest of those. max_schedule_lag_p99, when set, replaces it with an
// absolute limit (MLPerf-style strictness, or a looser bound for tests).
func lagBudget(sp *workload.Spec, rep *result.Report) (float64, string) {
	if limit := ms(sp.MaxScheduleLagP99.D()); limit > 0 {
		return limit, "max_schedule_lag_p99"
	}
	ref, basis := math.Inf(1), ""
	consider := func(v float64, what string) {
		if v > 0 && v < ref {
			ref, basis = v, what
		}
	}
	if rep.RequestRate > 0 { // the request rate (sessions bring several requests per arrival)
		consider(1e3/rep.RequestRate, "mean arrival gap")
	}
	for _, c := range sp.Classes {
		consider(ms(c.SLO.TTFT.D()), c.Name+" TTFT SLO")
		if cr := rep.Classes[c.Name]; cr != nil && cr.Completed > 0 {
			consider(cr.TTFTMs.P50, c.Name+" TTFT p50")
		}
	}
	frac := sp.ScheduleLagFraction
	if frac <= 0 {
		frac = workload.DefaultScheduleLagFraction
	}
	budget := math.Inf(1)
	desc := "no reference"
	if !math.IsInf(ref, 1) {
		budget = frac * ref
		desc = fmt.Sprintf("%g × %s %.1f ms", frac, basis, ref)
	}
	return budget, desc
}

// checkLag marks rep invalid when the schedule lag exceeds its budget.
func checkLag(sp *workload.Spec, rep *result.Report, lagP99 float64) {
	budget, desc := lagBudget(sp, rep)
	if lagP99 > budget {
		rep.Valid = false
		rep.InvalidReasons = append(rep.InvalidReasons, fmt.Sprintf("schedule lag p99 %.3f ms exceeds its budget %.3f ms (%s): the harness's lateness could change the reported figures", lagP99, budget, desc))
	}
}
