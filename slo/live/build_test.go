package live

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/llmesh/llmesh/bench/report"
	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/slo"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

// answer is what fakeProm returns for a query holding every one of has.
type answer struct {
	has []string
	vec []Sample
}

// fakeProm answers by the parts of the query Build varies; the queries
// themselves run against a real Prometheus in e2e (TestSLOLive).
type fakeProm struct {
	answers []answer
	// series answer the worst hours' attainment query, totals its
	// request counts.
	series, totals []Series
	at             []time.Time
}

func (f *fakeProm) Query(_ context.Context, expr string, at time.Time) ([]Sample, error) {
	f.at = append(f.at, at)
	for _, a := range f.answers {
		ok := true
		for _, h := range a.has {
			ok = ok && strings.Contains(expr, h)
		}
		if ok {
			return a.vec, nil
		}
	}
	return nil, nil
}

func (f *fakeProm) QueryRange(_ context.Context, expr string, start, end time.Time, step time.Duration) ([]Series, error) {
	if strings.Contains(expr, ") / ") {
		return f.series, nil
	}
	return f.totals, nil
}

func cls(c string, v float64, kv ...string) Sample {
	l := map[string]string{slo.LabelClass: c}
	for i := 0; i+1 < len(kv); i += 2 {
		l[kv[i]] = kv[i+1]
	}
	return Sample{Labels: l, Value: v}
}

func TestBuildGolden(t *testing.T) {
	cfg, err := config.LoadFile("../testdata/mesh.yaml")
	if err != nil {
		t.Fatal(err)
	}
	end := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	q := &fakeProm{answers: []answer{
		{[]string{"sum by (llmesh_class, llmesh_outcome, llmesh_slo_met)"}, []Sample{
			cls("interactive", 90, "llmesh_outcome", "ok", "llmesh_slo_met", "true"),
			cls("interactive", 6, "llmesh_outcome", "ok", "llmesh_slo_met", "false"),
			cls("interactive", 3, "llmesh_outcome", "http_status", "llmesh_slo_met", "false"),
			cls("interactive", 1, "llmesh_outcome", "preempted", "llmesh_slo_met", "false"),
			cls("batch", 200, "llmesh_outcome", "ok", "llmesh_slo_met", "true"),
		}},
		{[]string{"sum by (llmesh_class, llmesh_slo)"}, []Sample{
			cls("interactive", 5, "llmesh_slo", "ttft"), cls("interactive", 2, "llmesh_slo", "tpot"), cls("interactive", 4, "llmesh_slo", "failed"),
		}},
		{[]string{slo.MetricPreemptions}, []Sample{cls("batch", 12)}},
		{[]string{`gen_ai_token_type="output"`}, []Sample{cls("interactive", 12800), cls("batch", 76800)}},
		{[]string{`gen_ai_token_type="input"`}, []Sample{cls("interactive", 51200), cls("batch", 307200)}},
		{[]string{"histogram_quantile(0.99, sum by (le)", slo.MetricTTFT}, []Sample{{Value: 2.2}}},
		{[]string{"histogram_quantile(0.99, sum by (llmesh_class, le)", slo.MetricTTFT}, []Sample{cls("interactive", 0.48), cls("batch", 2.4)}},
		{[]string{"histogram_quantile(0.5, sum by (llmesh_class, le)", slo.MetricTTFT}, []Sample{cls("interactive", 0.09), cls("batch", 0.3)}},
		{[]string{"histogram_quantile(0.99, sum by (llmesh_class, le)", slo.MetricQueue}, []Sample{cls("interactive", 0.2), cls("batch", 1.5)}},
		// No samples in a class: NaN, which the report leaves out.
		{[]string{"histogram_quantile(0.5, sum by (llmesh_class, le)", slo.MetricTPOT}, []Sample{cls("interactive", 0.012), cls("batch", nan())}},
		{[]string{"sum by (llmesh_class)", slo.MetricTTFT + "_count"}, []Sample{cls("interactive", 99), cls("batch", 200)}},
		{[]string{"sum by (llmesh_class)", slo.MetricTTFT + "_sum"}, []Sample{cls("interactive", 19.8), cls("batch", 100)}},
	}, series: []Series{{Labels: map[string]string{slo.LabelClass: "interactive"}, Points: []Point{
		{end.Add(-2 * time.Hour), 0.97}, {end.Add(-time.Hour), 0.8}, {end, nan()},
	}}}, totals: []Series{{Labels: map[string]string{slo.LabelClass: "interactive"}, Points: []Point{
		{end.Add(-2 * time.Hour), 33}, {end.Add(-time.Hour), 5}, {end, 0},
	}}}}
	rep, err := Build(context.Background(), q, cfg, Options{End: end, Window: 24 * time.Hour, Prometheus: "http://prom:9090", Config: "mesh.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	for _, at := range q.at {
		if !at.Equal(end) {
			t.Fatalf("queried at %v, want the window's end %v", at, end)
		}
	}
	i := rep.Classes["interactive"]
	if i.Requests != 100 || i.Failed != 4 || i.SLOAttainment != 0.9 || i.Violations.Error != 3 || i.Violations.Preempted != 1 || i.MeetsTarget {
		t.Errorf("interactive %+v", i)
	}
	// 10% missed against a 5% budget: twice the budget, -100% left.
	if i.BudgetRemaining == nil || *i.BudgetRemaining < -1.0000001 || *i.BudgetRemaining > -0.9999999 {
		t.Errorf("interactive budget remaining %v, want -1", i.BudgetRemaining)
	}
	var html bytes.Buffer
	if err := report.Render(&html, rep, "html"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"interactive error budget remaining: -100.0%", "interactive worst hours: 2026-12-01T10:00:00Z 80.0% of 5"} {
		if !strings.Contains(html.String(), want) {
			t.Errorf("HTML report lacks %q", want)
		}
	}
	for _, f := range []string{"table", "markdown", "json"} {
		var buf bytes.Buffer
		if err := report.Render(&buf, rep, f); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join("testdata", "live."+f+".golden")
		if *update {
			if err := os.MkdirAll("testdata", 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run go test -update)", err)
		}
		if d := cmp.Diff(string(want), buf.String()); d != "" {
			t.Errorf("%s differs from %s (-want +got):\n%s", f, path, d)
		}
	}
	// The bench's reader reads it back.
	var buf bytes.Buffer
	if err := report.WriteJSON(&buf, rep); err != nil {
		t.Fatal(err)
	}
	if _, err := report.ReadJSON(&buf); err != nil {
		t.Fatal(err)
	}
}

func TestBuildRejectsShortWindow(t *testing.T) {
	cfg, err := config.LoadFile("../testdata/mesh.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Build(context.Background(), &fakeProm{}, cfg, Options{Window: time.Second}); err == nil || !strings.Contains(err.Error(), "window: 1s must be at least 1m") {
		t.Errorf("err = %v", err)
	}
}

func nan() float64 { var z float64; return z / z }
