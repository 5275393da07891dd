package compare

import (
	"bytes"
	"strings"
	"testing"

	"github.com/llmesh/llmesh/bench/result"
)

func rep(ttftP99, goodput float64) *result.Report {
	return &result.Report{Valid: true, Classes: map[string]*result.ClassReport{
		"interactive": {TTFTMs: result.Percentiles{P99: ttftP99}, GoodputRPS: goodput, SLOAttainment: 0.99},
	}}
}

func TestFromReportsAndMarkdown(t *testing.T) {
	a := []*result.Report{rep(100, 5), rep(120, 5.1), rep(90, 4.9)}
	b := []*result.Report{rep(111, 5), rep(131, 5.2), rep(100, 4.9)}
	ms, err := FromReports(a, b, map[string]string{"interactive": "ttft_p99_ms"})
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != len(classMetrics) || ms[0].Name != "interactive.ttft_p99_ms" || !ms[0].Primary || ms[1].Primary {
		t.Fatalf("metrics: %+v", ms)
	}
	r, err := Judge(ms, 0.05)
	if err != nil {
		t.Fatal(err)
	}
	if r.Verdict != Worse {
		t.Fatalf("verdict %s, want worse", r.Verdict)
	}
	g, _ := ParseGate("interactive.ttft_p99_ms>+5%")
	gr, err := Check(r, []Gate{g})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := WriteMarkdown(&buf, r, gr); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"verdict: **worse**", "| **interactive.ttft_p99_ms** |", "**breached**"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, buf.String())
		}
	}
	buf.Reset()
	if err := WriteMarkdown(&buf, &Result{Verdict: Inconclusive}, nil); err != nil {
		t.Fatal(err)
	}
	if s := buf.String(); !strings.Contains(s, "idle host") || strings.Contains(s, "| metric |") {
		t.Errorf("inconclusive summary:\n%s", s)
	}
}

func TestFromReportsRejects(t *testing.T) {
	bad := rep(1, 1)
	bad.Valid = false
	for _, c := range []struct {
		name    string
		a, b    []*result.Report
		primary map[string]string
		want    string
	}{
		{"unpaired", []*result.Report{rep(1, 1)}, nil, nil, "arm A has 1 units, arm B 0"},
		{"nothing ran", nil, nil, nil, "nothing ran"},
		{"invalid", []*result.Report{bad}, []*result.Report{rep(1, 1)}, nil, "arm A unit 0: report is not valid"},
		{"primary class", []*result.Report{rep(1, 1)}, []*result.Report{rep(1, 1)}, map[string]string{"batch": "goodput_rps"}, `primary[batch]: no class "batch"`},
		{"primary metric", []*result.Report{rep(1, 1)}, []*result.Report{rep(1, 1)}, map[string]string{"interactive": "p42"}, `primary[interactive]: metric "p42"`},
	} {
		_, err := FromReports(c.a, c.b, c.primary)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want %q", c.name, err, c.want)
		}
	}
}
