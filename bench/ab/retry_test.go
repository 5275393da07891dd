package ab

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/llmesh/llmesh/bench/harness"
	"github.com/llmesh/llmesh/bench/result"
)

// invalidFirst runs synthetic runs, the first `bad` of them invalid (as a
// harness that fell behind on a busy host reports them), and counts calls.
func invalidFirst(bad int, calls *int, ids *[]string) func(context.Context, harness.Options) (*result.Report, []result.Record, error) {
	return func(ctx context.Context, o harness.Options) (*result.Report, []result.Record, error) {
		rep, recs, err := synthetic(10, 40)(ctx, o)
		*calls++
		*ids = append(*ids, o.RunID)
		if *calls <= bad {
			rep.Valid = false
			rep.InvalidReasons = []string{"schedule lag p99 2s > 1s"}
		}
		return rep, recs, err
	}
}

// A pair with an invalid run is run again (both arms, the same seed) up to
// Retries times; the report keeps the accepted pair and lists each retry.
func TestCompareRetriesInvalidPair(t *testing.T) {
	w := compile(t, `
requests: 40
arrival: {process: constant, rate: 100}
classes: [{name: a, slo: {ttft: 50ms}, prompt_tokens: {value: 8}, output_tokens: {value: 4}}]`)
	var calls int
	var ids []string
	res, err := Compare(context.Background(), Options{Workload: w, A: URL{Endpoint: "x"}, B: URL{Endpoint: "y"}, Repeats: 2, Resamples: 200, Retries: 1, Run: invalidFirst(1, &calls, &ids)})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Valid || len(res.Runs) != 4 || calls != 6 || len(res.Retried) != 1 {
		t.Fatalf("valid %v, %d runs, %d calls, retried %+v; want valid, 4 runs, 6 calls, one retry", res.Valid, len(res.Runs), calls, res.Retried)
	}
	if r := res.Retried[0]; r.Repeat != 0 || r.Attempt != 1 || r.Seed != w.Spec.Seed || len(r.Reasons) != 1 || !strings.HasPrefix(r.Reasons[0], "A: schedule lag") {
		t.Errorf("retry %+v", r)
	}
	if got := strings.Join(ids, " "); got != "A/1 B/1 A/1.2 B/1.2 A/2 B/2" {
		t.Errorf("run ids %q", got)
	}
	if res.Runs[0].Seed != res.Runs[1].Seed || res.Runs[0].Seed != w.Spec.Seed {
		t.Errorf("the retried pair changed seed: %+v", res.Runs[:2])
	}
	var md bytes.Buffer
	if err := Markdown(&md, res); err != nil || !strings.Contains(md.String(), fmt.Sprintf("repeat 1 (seed %d) run again after attempt 1: A: schedule lag p99 2s > 1s", w.Spec.Seed)) {
		t.Errorf("markdown (%v) does not list the retry:\n%s", err, md.String())
	}
}

// When every retry is invalid too, the A/B is Inconclusive: no per-metric
// verdict anywhere, and the report says what to do.
func TestCompareInconclusiveAfterRetries(t *testing.T) {
	w := compile(t, `
requests: 40
arrival: {process: constant, rate: 100}
classes: [{name: a, slo: {ttft: 50ms}, prompt_tokens: {value: 8}, output_tokens: {value: 4}}]`)
	var calls int
	var ids []string
	res, err := Compare(context.Background(), Options{Workload: w, A: URL{Endpoint: "x"}, B: URL{Endpoint: "y"}, Repeats: 1, Resamples: 200, Retries: 2, Run: invalidFirst(100, &calls, &ids)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Valid || calls != 6 || len(res.Retried) != 2 || len(res.Runs) != 2 {
		t.Fatalf("valid %v, %d calls, %d retries, %d runs; want invalid after 3 attempts", res.Valid, calls, len(res.Retried), len(res.Runs))
	}
	if !strings.HasPrefix(res.Verdict, Inconclusive) || !strings.Contains(res.Verdict, "after 2 retries") || !strings.Contains(res.Verdict, "idle host") {
		t.Errorf("verdict %q", res.Verdict)
	}
	for _, d := range res.Classes["a"] {
		if d.Verdict != "" {
			t.Errorf("%s: per-metric verdict %q in an inconclusive A/B", d.Metric, d.Verdict)
		}
	}
	for name, render := range map[string]func(*bytes.Buffer, *Result) error{
		"table":    func(b *bytes.Buffer, r *Result) error { return Table(b, r) },
		"markdown": func(b *bytes.Buffer, r *Result) error { return Markdown(b, r) },
		"html":     func(b *bytes.Buffer, r *Result) error { return HTML(b, r) },
	} {
		var b bytes.Buffer
		if err := render(&b, res); err != nil {
			t.Fatal(err)
		}
		for _, v := range []string{Better, Worse, NoDiff} {
			if strings.Contains(strings.ReplaceAll(b.String(), res.Verdict, ""), "| "+v+" |") || strings.Contains(b.String(), "  "+v+"\n") {
				t.Errorf("%s shows a per-metric verdict %q:\n%s", name, v, b.String())
			}
		}
		if !strings.Contains(b.String(), "pin the engine") {
			t.Errorf("%s does not say what to do:\n%s", name, b.String())
		}
	}
}
