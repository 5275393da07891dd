package sweep

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"math"
	"os"
	"path/filepath"
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

// A synthetic engine whose TTFT grows linearly with the offered rate
// (1 ms per req/s) shows the knee where it should be: the interactive
// class (100 ms SLO) crosses at 100 req/s.
func TestKneeAndMaxGoodput(t *testing.T) {
	res := kneeSweep(t)
	if len(res.Points) != 4 || res.Points[0].Rate != 50 {
		t.Fatalf("points %+v", res.Points)
	}
	k := res.Knees["interactive"]
	if !k.Found || k.LastGood != 80 || k.FirstBad != 120 || k.Metric != "ttft_p99" || math.Abs(k.Estimate-100) > 2 {
		t.Errorf("interactive knee %+v, want between 80 and 120, ≈100", k)
	}
	if b := res.Knees["batch"]; b.Found || b.LastGood != 150 {
		t.Errorf("batch knee %+v, want none up to 150", b)
	}
	if res.MaxGoodputRate != 80 {
		t.Errorf("max goodput at rate %g (%.2f req/s), want 80", res.MaxGoodputRate, res.MaxGoodputRPS)
	}
	var buf bytes.Buffer
	if err := Table(&buf, res); err != nil || !strings.Contains(buf.String(), "knee interactive: ttft_p99 crosses its SLO between 80 and 120") {
		t.Errorf("table: %v\n%s", err, buf.String())
	}
}

// kneeSweep sweeps a synthetic engine whose TTFT is 1 ms per req/s.
func kneeSweep(t *testing.T) *Result {
	t.Helper()
	s, err := workload.Parse([]byte(`
requests: 200
arrival: {process: constant, rate: 10}
classes:
  - {name: interactive, share: 1, slo: {ttft: 100ms}, attainment_target: 0.9, prompt_tokens: {value: 8}, output_tokens: {value: 4}}
  - {name: batch, share: 1, slo: {ttft: 1s}, attainment_target: 0.9, prompt_tokens: {value: 8}, output_tokens: {value: 4}}`))
	if err != nil {
		t.Fatal(err)
	}
	s.Default()
	w, err := workload.Compile(s, workload.CompileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	synthetic := func(_ context.Context, o harness.Options) (*result.Report, []result.Record, error) {
		rate := o.Workload.Spec.Arrival.Rate
		var recs []result.Record
		src := o.Workload.Source()
		for {
			it, ok := src.Next()
			if !ok {
				break
			}
			at := int64(it.At)
			ttft := int64(rate * float64(time.Millisecond))
			r := result.Record{Index: it.Index, Class: o.Workload.Classes[it.Class].Name, IntendedNS: at, SentNS: at, FirstTokenNS: at + ttft, OutputTokens: 4, Status: result.StatusOK}
			for k := int64(0); k < 4; k++ {
				r.ChunkNS = append(r.ChunkNS, r.FirstTokenNS+k*int64(time.Millisecond))
			}
			r.DoneNS = r.ChunkNS[3]
			recs = append(recs, r)
		}
		return stats.Summarize(recs, stats.Meta{Workload: o.Workload}), recs, nil
	}
	res, err := Sweep(context.Background(), Options{Workload: w, Target: "x", Rates: []float64{150, 50, 80, 120}, Run: synthetic})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res.Reports {
		r.Date = "2026-01-02T03:04:05Z"
	}
	return res
}

func TestSweepRejectsBadRates(t *testing.T) {
	if _, err := Sweep(context.Background(), Options{Workload: &workload.Workload{}, Target: "x", Rates: []float64{1, -2}}); err == nil || !strings.Contains(err.Error(), "rates[1]: -2 must be positive") {
		t.Errorf("err = %v", err)
	}
}

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

// Every renderer is golden-tested; the HTML page is self-contained.
func TestRenderGolden(t *testing.T) {
	res := kneeSweep(t)
	for _, f := range Formats {
		var buf bytes.Buffer
		if err := Render(&buf, res, f); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		path := filepath.Join("testdata", "sweep."+f+".golden")
		if *update {
			if err := os.MkdirAll("testdata", 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run with -update)", err)
		}
		if diff := cmp.Diff(string(want), buf.String()); diff != "" {
			t.Errorf("%s differs from %s (-want +got):\n%s", f, path, diff)
		}
		if f == "html" {
			h := strings.ReplaceAll(buf.String(), `xmlns="http://www.w3.org/2000/svg"`, "")
			for _, bad := range []string{"http://", "https://", "<script", "<link", "src="} {
				if strings.Contains(h, bad) {
					t.Errorf("sweep HTML references an external resource or runs script: %q", bad)
				}
			}
			if n := strings.Count(h, `<figure class="chart"`); n != 3 {
				t.Errorf("%d charts, want 3", n)
			}
		}
	}
	if err := Render(&bytes.Buffer{}, res, "pdf"); err == nil || !strings.Contains(err.Error(), `"pdf"`) {
		t.Errorf("Render(pdf) = %v", err)
	}
}

func TestGate(t *testing.T) {
	res := kneeSweep(t)
	if err := Gate(res); err != nil {
		t.Errorf("a sweep with an operating point (rate 80): %v", err)
	}
	none := *res
	none.MaxGoodputRPS, none.MaxGoodputRate = 0, 0
	if err := Gate(&none); !errors.Is(err, ErrNoOperatingPoint) {
		t.Errorf("no rate met every target: %v, want ErrNoOperatingPoint", err)
	}
	invalid := *res
	invalid.Points = append([]Point(nil), res.Points...)
	for i := range invalid.Points {
		invalid.Points[i].Valid = false
	}
	if err := Gate(&invalid); !errors.Is(err, ErrNoValidRun) {
		t.Errorf("every run invalid: %v, want ErrNoValidRun", err)
	}
}

// Against a real loopback target the sweep's one JSONL export holds every
// rate's records, each naming its rate.
func TestSweepJSONL(t *testing.T) {
	srv := benchtest.Start(t, benchtest.Config{TTFT: time.Millisecond})
	s, err := workload.Parse([]byte(`
requests: 20
arrival: {process: constant, rate: 100}
max_schedule_lag_p99: 1s
classes: [{name: a, prompt_tokens: {value: 8}, output_tokens: {value: 2}}]`))
	if err != nil {
		t.Fatal(err)
	}
	s.Default()
	w, err := workload.Compile(s, workload.CompileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var jsonl bytes.Buffer
	if _, err := Sweep(context.Background(), Options{Workload: w, Target: srv.HTTPURL, Rates: []float64{200, 100}, JSONL: &jsonl}); err != nil {
		t.Fatal(err)
	}
	recs, err := result.ReadRecords(&jsonl)
	if err != nil {
		t.Fatal(err)
	}
	perRun := map[string]int{}
	for _, r := range recs {
		perRun[r.Run]++
	}
	if diff := cmp.Diff(map[string]int{"rate=100": 20, "rate=200": 20}, perRun); diff != "" {
		t.Errorf("records per run (-want +got):\n%s", diff)
	}
}
