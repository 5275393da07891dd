package simulate

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/llmesh/llmesh/bench/result"
	"github.com/llmesh/llmesh/bench/stats"
)

// TestRecordsAreWhatTheReportRead: the records a run writes with
// Options.Records, read back and summarized as `bench run` summarizes its
// own, give the run's report to the bit (the report streamed them and
// kept none); every request has one record, each run's in item order.
// A single engine and a fleet with a hop, each with client timeouts.
func TestRecordsAreWhatTheReportRead(t *testing.T) {
	w := testWorkload(t)
	w.Spec.Timeout = 3_000_000_000 // 3 s: some clients give up at load 1.3
	for _, o := range []Options{testOptions(), {MaxInflight: 16, SaturationRequests: 300, Engines: 2, Proxies: 2, Hop: 500_000}} {
		var buf bytes.Buffer
		o.Records = NewRecordWriter(&buf)
		o.SkipFloor = true
		res, err := Evaluate(w, []string{"fifo", "preemptive"}, []float64{1.3}, o)
		if err != nil {
			t.Fatal(err)
		}
		recs, err := result.ReadRecords(&buf)
		if err != nil {
			t.Fatal(err)
		}
		byRun := map[string][]result.Record{}
		for _, r := range recs {
			byRun[r.Run] = append(byRun[r.Run], r)
		}
		if len(byRun) != len(res.Runs) {
			t.Fatalf("engines %d: records of %d runs, want %d", o.Engines, len(byRun), len(res.Runs))
		}
		for _, run := range res.Runs {
			name := run.Policy + "/load=" + loadKey(run.Load)
			rs := byRun[name]
			if len(rs) != run.Sim.Requests {
				t.Fatalf("%s: %d records, want %d", name, len(rs), run.Sim.Requests)
			}
			timeouts := 0
			for i, r := range rs {
				if r.Index != rs[0].Index+i {
					t.Fatalf("%s: record %d has index %d", name, i, r.Index)
				}
				if r.Status == result.StatusTimeout {
					timeouts++
				}
			}
			if timeouts == 0 {
				t.Errorf("%s: no client gave up; the test wants some", name)
			}
			got := stats.Summarize(rs, stats.Meta{Workload: w, Target: "virtual-time " + run.Report.Target[len("virtual-time "):], Policy: run.Policy, Load: run.Load})
			// The rate is the scaled workload's, not the records'.
			got.RequestRate = run.RequestRate
			wantJSON, _ := json.Marshal(run.Report)
			gotJSON, _ := json.Marshal(got)
			if !bytes.Equal(wantJSON, gotJSON) {
				t.Errorf("%s: the records summarize differently (-report +records):\n%s", name, cmp.Diff(strings.Split(string(wantJSON), ","), strings.Split(string(gotJSON), ",")))
			}
		}
	}
}
