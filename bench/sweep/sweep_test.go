package sweep

import (
	"bytes"
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

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

func TestSweepRejectsBadRates(t *testing.T) {
	if _, err := Sweep(context.Background(), Options{Workload: &workload.Workload{}, Target: "x", Rates: []float64{1, -2}}); err == nil || !strings.Contains(err.Error(), "rates[1]: -2 must be positive") {
		t.Errorf("err = %v", err)
	}
}
