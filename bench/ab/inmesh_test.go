package ab

import (
	"bytes"
	"strings"
	"testing"

	"github.com/llmesh/llmesh/bench/result"
)

// TestTableShowsPreemptionsAndQueue: runs whose reports carry llmesh's
// preemption counts and queue times show them per class and arm.
func TestTableShowsPreemptionsAndQueue(t *testing.T) {
	rep := func(preempt int, q float64) *result.Report {
		return &result.Report{Classes: map[string]*result.ClassReport{
			"batch": {Preemptions: preempt, QueueMs: &result.Percentiles{N: 1, P50: q}},
			"quiet": {},
		}}
	}
	r := &Result{Workload: "w", A: "fifo", B: "preemptive", Repeats: 2, Valid: true, Verdict: "v", Runs: []Run{
		{Arm: "A", Report: rep(0, 10)}, {Arm: "B", Report: rep(3, 2)}, {Arm: "A", Report: rep(0, 20)}, {Arm: "B", Report: rep(4, 4)},
	}}
	var b bytes.Buffer
	if err := Table(&b, r); err != nil {
		t.Fatal(err)
	}
	want := "batch in llmesh: preemptions A 0, B 7; llmesh queue p50 A 15.0 ms, B 3.0 ms"
	if !strings.Contains(b.String(), want) || strings.Contains(b.String(), "quiet in llmesh") {
		t.Errorf("table lacks %q (or names a class without figures):\n%s", want, b.String())
	}
}
