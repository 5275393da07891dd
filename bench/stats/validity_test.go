package stats

import (
	"strings"
	"testing"
	"time"

	"github.com/llmesh/llmesh/bench/result"
	"github.com/llmesh/llmesh/bench/workload"
)

// The lag budget is a fraction of the smallest figure the lateness could
// move: here the hi class's measured TTFT p50 of 50 ms (below its 100 ms
// SLO and the 100 ms arrival gap), so 10% of it is 5 ms. An explicit
// max_schedule_lag_p99 replaces the relative budget.
func TestLagBudgetRelativeToMeasured(t *testing.T) {
	run := func(lateMs int64, cap time.Duration) *result.Report {
		w := testWorkload(t)
		w.Spec.MaxScheduleLagP99 = workload.Duration(cap)
		var recs []result.Record
		for i := 0; i < 100; i++ {
			r := rec(i, "hi", int64(i)*100, 50, 1)
			if i%10 == 0 {
				r.IntendedNS -= lateMs * msNS
			}
			recs = append(recs, r)
		}
		return Summarize(recs, Meta{Workload: w})
	}
	if rep := run(3, 0); !rep.Valid {
		t.Errorf("3 ms late against a 5 ms budget: invalid %v", rep.InvalidReasons)
	}
	rep := run(8, 0)
	if rep.Valid || len(rep.InvalidReasons) != 1 || !strings.Contains(rep.InvalidReasons[0], "(0.1 × hi TTFT p50 50.0 ms)") {
		t.Errorf("8 ms late against a 5 ms budget: valid %v %v", rep.Valid, rep.InvalidReasons)
	}
	if rep := run(3, time.Millisecond); rep.Valid || !strings.Contains(rep.InvalidReasons[0], "max_schedule_lag_p99") {
		t.Errorf("3 ms late against an absolute 1 ms: valid %v %v", rep.Valid, rep.InvalidReasons)
	}
	if rep := run(8, 20*time.Millisecond); !rep.Valid {
		t.Errorf("8 ms late against an absolute 20 ms: invalid %v", rep.InvalidReasons)
	}
}
