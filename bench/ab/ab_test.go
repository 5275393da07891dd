package ab

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/llmesh/llmesh/bench/benchtest"
	"github.com/llmesh/llmesh/bench/harness"
	"github.com/llmesh/llmesh/bench/result"
	"github.com/llmesh/llmesh/bench/stats"
	"github.com/llmesh/llmesh/bench/workload"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func compile(t *testing.T, y string) *workload.Workload {
	t.Helper()
	s, err := workload.Parse([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	s.Default()
	w, err := workload.Compile(s, workload.CompileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// Real targets: the runs alternate A B A B with paired seeds and every
// run's records reach the comparison. (Verdicts on real timing are not
// asserted here: on a loaded machine the "fast" target is not reliably
// fast; TestCompareDetectsDifference checks them on synthetic runs.)
func TestCompareRealTargets(t *testing.T) {
	slow := benchtest.Start(t, benchtest.Config{TTFT: 40 * time.Millisecond})
	fast := benchtest.Start(t, benchtest.Config{TTFT: 2 * time.Millisecond})
	w := compile(t, `
name: ab-test
requests: 60
arrival: {process: constant, rate: 200}
max_schedule_lag_p99: 1s
classes: [{name: a, slo: {ttft: 20ms}, prompt_tokens: {value: 8}, output_tokens: {value: 4}}]`)
	var log, jsonl bytes.Buffer
	res, err := Compare(context.Background(), Options{Workload: w, A: URL{Label: "slow", Endpoint: slow.HTTPURL}, B: URL{Label: "fast", Endpoint: fast.HTTPURL}, Repeats: 2, Resamples: 300, Log: &log, JSONL: &jsonl})
	if err != nil {
		t.Fatal(err)
	}
	// One export holds every run's records, each naming its arm and pair.
	recs, err := result.ReadRecords(&jsonl)
	if err != nil {
		t.Fatal(err)
	}
	perRun := map[string]int{}
	for _, r := range recs {
		perRun[r.Run]++
	}
	if diff := cmp.Diff(map[string]int{"A/1": 60, "B/1": 60, "A/2": 60, "B/2": 60}, perRun); diff != "" {
		t.Errorf("records per run in the JSONL export (-want +got):\n%s", diff)
	}
	if len(res.Runs) != 4 || res.Runs[0].Arm != "A" || res.Runs[1].Arm != "B" || res.Runs[2].Seed != w.Spec.Seed+1 || res.Runs[3].Seed != w.Spec.Seed+1 {
		t.Fatalf("runs not interleaved A B A B with paired seeds: %+v", res.Runs)
	}
	for _, r := range res.Runs {
		if r.Report.Completed != 60 {
			t.Errorf("run %s/%d completed %d of 60", r.Arm, r.Repeat, r.Report.Completed)
		}
	}
	got := map[string]Delta{}
	for _, d := range res.Classes["a"] {
		got[d.Metric] = d
	}
	// The slow target sleeps 40 ms before its first token: that much is
	// certain whatever the load.
	if d := got["ttft_p50_ms"]; d.A < 40 {
		t.Errorf("ttft_p50 of the slow arm %.1f ms < 40", d.A)
	}
	var buf bytes.Buffer
	if err := Table(&buf, res); err != nil || !strings.Contains(buf.String(), "ttft_p99_ms") || !strings.Contains(buf.String(), "verdict: B (fast) vs A (slow)") {
		t.Errorf("table: %v\n%s", err, buf.String())
	}
	if strings.Count(log.String(), "ab: repeat") != 4 {
		t.Errorf("log:\n%s", log.String())
	}
}

// synthetic returns a Run that fabricates records with TTFTs drawn
// uniformly from [lo, lo+span) ms, deterministically by request index.
func synthetic(lo, span int) func(context.Context, harness.Options) (*result.Report, []result.Record, error) {
	return func(_ context.Context, o harness.Options) (*result.Report, []result.Record, error) {
		var recs []result.Record
		src := o.Workload.Source()
		for {
			it, ok := src.Next()
			if !ok {
				break
			}
			at := int64(it.At)
			ttft := int64(lo+(it.Index*37)%span) * int64(time.Millisecond)
			r := result.Record{Index: it.Index, Class: "a", IntendedNS: at, SentNS: at, FirstTokenNS: at + ttft, OutputTokens: 4, Status: result.StatusOK}
			for k := int64(0); k < 4; k++ {
				r.ChunkNS = append(r.ChunkNS, r.FirstTokenNS+k*int64(5*time.Millisecond))
			}
			r.DoneNS = r.ChunkNS[3]
			recs = append(recs, r)
		}
		return stats.Summarize(recs, stats.Meta{Workload: o.Workload}), recs, nil
	}
}

// B's TTFTs are 40 ms lower: better TTFT and attainment, and the verdict
// says so.
func TestCompareDetectsDifference(t *testing.T) {
	w := compile(t, `
requests: 200
arrival: {process: constant, rate: 100}
classes: [{name: a, slo: {ttft: 50ms}, prompt_tokens: {value: 8}, output_tokens: {value: 4}}]`)
	slowFast := func(ctx context.Context, o harness.Options) (*result.Report, []result.Record, error) {
		if o.Target == "slow" {
			return synthetic(40, 40)(ctx, o)
		}
		return synthetic(1, 39)(ctx, o)
	}
	res, err := Compare(context.Background(), Options{Workload: w, A: URL{Endpoint: "slow"}, B: URL{Endpoint: "fast"}, Repeats: 2, Resamples: 500, Run: slowFast})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Delta{}
	for _, d := range res.Classes["a"] {
		got[d.Metric] = d
	}
	if d := got["ttft_p50_ms"]; d.Verdict != Better || d.CIHigh >= 0 || d.Diff > -30 {
		t.Errorf("ttft_p50 delta %+v", d)
	}
	if d := got["slo_attainment"]; d.Verdict != Better || d.B != 1 || d.A > 0.5 {
		t.Errorf("slo_attainment delta %+v", d)
	}
	if d := got["tpot_p99_ms"]; d.Verdict != NoDiff {
		t.Errorf("tpot_p99 delta %+v (identical in both arms)", d)
	}
	if !strings.Contains(res.Verdict, "better") || strings.Contains(res.Verdict, "worse") {
		t.Errorf("verdict %q", res.Verdict)
	}
}

// Identical arms give exactly zero differences and no verdict.
func TestCompareIdenticalArms(t *testing.T) {
	w := compile(t, `
requests: 100
arrival: {process: constant, rate: 100}
classes: [{name: a, slo: {ttft: 50ms, tpot: 10ms}, prompt_tokens: {value: 8}, output_tokens: {value: 4}}]`)
	res, err := Compare(context.Background(), Options{Workload: w, A: URL{Endpoint: "x"}, B: URL{Endpoint: "y"}, Repeats: 2, Run: synthetic(10, 60)})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range res.Classes["a"] {
		if d.Diff != 0 || d.CILow > 0 || d.CIHigh < 0 || d.Verdict != NoDiff {
			t.Errorf("%+v", d)
		}
	}
	if !strings.HasSuffix(res.Verdict, NoDiff) {
		t.Errorf("verdict %q", res.Verdict)
	}
}

func TestCompareTargetFailure(t *testing.T) {
	w := compile(t, `
requests: 5
arrival: {rate: 100}
classes: [{name: a, prompt_tokens: {value: 8}, output_tokens: {value: 4}}]`)
	bad := Func{Label: "broken", Start: func(context.Context) (string, func(), error) { return "", nil, context.DeadlineExceeded }}
	_, err := Compare(context.Background(), Options{Workload: w, A: bad, B: bad})
	if err == nil || !strings.Contains(err.Error(), `repeat 1 arm A (broken): starting target`) {
		t.Errorf("err = %v", err)
	}
}

// A goodput difference that comes only from slightly different run
// durations (all requests met their SLO in both arms) is not a finding.
func TestTinyEffectIsNoDifference(t *testing.T) {
	w := compile(t, `
requests: 50
arrival: {process: constant, rate: 100}
classes: [{name: a, slo: {ttft: 1s}, prompt_tokens: {value: 8}, output_tokens: {value: 4}}]`)
	a, b := newArmSamples(), newArmSamples()
	for i := 0; i < 50; i++ {
		a.met["a"] = append(a.met["a"], true)
		b.met["a"] = append(b.met["a"], true)
	}
	a.seconds, b.seconds = 10, 10.01
	for _, d := range deltas(a, b, w, 200)["a"] {
		if d.Verdict != NoDiff {
			t.Errorf("%+v", d)
		}
	}
}

// An A/B whose arm fails to start is no experiment: it is never valid and
// gives no verdict, even though no finished run was invalid.
func TestCompareFailedArmIsNotValid(t *testing.T) {
	w := compile(t, `
name: ab-fail
requests: 5
arrival: {process: constant, rate: 200}
classes: [{name: a, prompt_tokens: {value: 8}, output_tokens: {value: 4}}]`)
	broken := Func{Label: "nosuch", Start: func(context.Context) (string, func(), error) {
		return "", nil, errors.New("no such policy")
	}}
	for _, tc := range []struct {
		name string
		a, b Target
		runs int
	}{
		{"A fails", broken, URL{Endpoint: "127.0.0.1:1"}, 0},
		{"B fails", URL{Endpoint: "127.0.0.1:1"}, broken, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := func(_ context.Context, ho harness.Options) (*result.Report, []result.Record, error) {
				return &result.Report{Label: ho.Label, Valid: true, Classes: map[string]*result.ClassReport{}}, nil, nil
			}
			res, err := Compare(context.Background(), Options{Workload: w, A: tc.a, B: tc.b, Repeats: 1, Run: run})
			if err == nil || !strings.Contains(err.Error(), "no such policy") {
				t.Fatalf("error %v, want the arm's start failure", err)
			}
			if res.Valid || len(res.Runs) != tc.runs || !strings.HasPrefix(res.Verdict, Inconclusive) || !strings.Contains(res.Verdict, "no such policy") {
				t.Errorf("valid %v, %d runs, verdict %q: want invalid, %d runs, Inconclusive naming the cause", res.Valid, len(res.Runs), res.Verdict, tc.runs)
			}
			var js bytes.Buffer
			if err := WriteJSON(&js, res); err != nil || !strings.Contains(js.String(), `"valid": false`) {
				t.Errorf("JSON (%v) does not say invalid:\n%s", err, js.String())
			}
		})
	}
}
