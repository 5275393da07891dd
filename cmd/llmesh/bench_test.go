package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/llmesh/llmesh/bench/benchtest"
	"github.com/llmesh/llmesh/bench/report"
)

func benchMain(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	err := Main(context.Background(), append([]string{"bench"}, args...), &out, &errb)
	return out.String(), errb.String(), err
}

func exitCodeOf(err error) int {
	var ec *exitCode
	if errors.As(err, &ec) {
		return ec.code
	}
	if err != nil {
		return 1
	}
	return 0
}

func TestBenchRunQuickAndReport(t *testing.T) {
	srv := benchtest.Start(t, benchtest.Config{})
	dir := t.TempDir()
	js, jl := filepath.Join(dir, "run.json"), filepath.Join(dir, "run.jsonl")
	out, _, err := benchMain(t, "run", "--target", srv.HTTPURL, "--rate", "200", "--requests", "50", "--prompt-tokens", "16", "--max-tokens", "4", "--json", js, "--jsonl", jl, "--quiet")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "50 requests") || !strings.Contains(out, "default") {
		t.Errorf("table output:\n%s", out)
	}
	f, err := os.Open(js)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := report.ReadJSON(f)
	f.Close()
	if err != nil || rep.Completed != 50 {
		t.Fatalf("report %v, completed %d", err, rep.Completed)
	}
	lines, _ := os.ReadFile(jl)
	if n := strings.Count(string(lines), "\n"); n != 50 {
		t.Errorf("%d JSONL lines, want 50", n)
	}
	// The JSONL export alone rebuilds the same statistics.
	wl := filepath.Join(dir, "w.yaml")
	mustWrite(t, wl, []byte("requests: 50\narrival: {rate: 200}\nclasses: [{name: default, prompt_tokens: {value: 16}, output_tokens: {value: 4}, send_priority: false}]\n"), 0o644)
	mustWrite(t, jl+".cut", append(lines, []byte("{\"index\": 99, \"cla")...), 0o644)
	re, _, err := benchMain(t, "report", "--records", jl+".cut", "--workload", wl, "--format", "json")
	if err == nil || !strings.Contains(err.Error(), "line 51") || !strings.Contains(err.Error(), "summarizing the 50 records") {
		t.Errorf("records with a cut-off last line: %v", err)
	}
	back, rerr := report.ReadJSON(strings.NewReader(re))
	if rerr != nil || back.Completed != 50 || back.P99TTFTMs != rep.P99TTFTMs {
		t.Errorf("rebuilt report: %v, completed %d, p99 %v vs %v", rerr, back.Completed, back.P99TTFTMs, rep.P99TTFTMs)
	}
	md, _, err := benchMain(t, "report", js, "--format", "markdown")
	if err != nil || !strings.HasPrefix(md, "## quick") {
		t.Errorf("report markdown: %v\n%s", err, md)
	}
	// The gate: an SLO nobody can meet fails with exit code 3.
	_, _, err = benchMain(t, "run", "--target", srv.HTTPURL, "--rate", "200", "--requests", "20", "--max-tokens", "2", "--ttft-slo", "1ns", "--slo-gate", "--max-lag", "10s", "--quiet")
	if exitCodeOf(err) != 3 || !strings.Contains(err.Error(), "attainment target missed") {
		t.Errorf("slo gate: exit %d, %v", exitCodeOf(err), err)
	}
}

func TestBenchBadInput(t *testing.T) {
	dir := t.TempDir()
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := "http://" + l.Addr().String()
	l.Close()
	js := filepath.Join(dir, "dead.json")
	_, _, err := benchMain(t, "run", "--target", dead, "--rate", "100", "--requests", "5", "--json", js, "--quiet")
	if err == nil || !strings.Contains(err.Error(), "no request completed (5 failed)") || !strings.Contains(err.Error(), "refused") {
		t.Errorf("unreachable target: %v", err)
	}
	if b, _ := os.ReadFile(js); !strings.Contains(string(b), `"failed": 5`) {
		t.Errorf("partial report not written:\n%.300s", b)
	}

	// Every flag problem at once, exit code 2.
	_, _, err = benchMain(t, "run", "--rate", "-1", "--format", "pdf", "--prompt-tokens", "-3")
	if exitCodeOf(err) != 2 {
		t.Errorf("exit %d, want 2", exitCodeOf(err))
	}
	for _, want := range []string{"--target: required", `--format: "pdf"`, "arrival.rate: -1", "classes[0].prompt_tokens.value: -3"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("flag errors lack %q: %v", want, err)
		}
	}

	bad := filepath.Join(dir, "bad.yaml")
	mustWrite(t, bad, []byte("requests: 5\narrival: {process: trace, trace: t.csv}\nclasses: [{name: a, slo: {ttft: -5ms}}]\n"), 0o644)
	mustWrite(t, filepath.Join(dir, "t.csv"), []byte("TIMESTAMP,ContextTokens,GeneratedTokens\n1,2,3\n2,x,3\n"), 0o644)
	_, _, err = benchMain(t, "run", "--target", dead, "--workload", bad)
	if exitCodeOf(err) != 2 || err == nil || !strings.Contains(err.Error(), `classes[0].slo.ttft: "-5ms" must be positive`) {
		t.Errorf("bad workload: exit %d %v", exitCodeOf(err), err)
	}
	mustWrite(t, bad, []byte("arrival: {process: trace, trace: t.csv}\nclasses: [{name: a}]\n"), 0o644)
	_, _, err = benchMain(t, "run", "--target", dead, "--workload", bad)
	if err == nil || !strings.Contains(err.Error(), "arrival.trace:") || !strings.Contains(err.Error(), `line 3: ContextTokens: "x"`) {
		t.Errorf("bad trace: %v", err)
	}
	_, _, err = benchMain(t, "report", filepath.Join(dir, "t.csv"))
	if err == nil || !strings.Contains(err.Error(), "not a JSON report") {
		t.Errorf("report of a non-report: %v", err)
	}
}

func TestBenchTargetErrorsKeepPartialResults(t *testing.T) {
	srv := benchtest.Start(t, benchtest.Config{})
	dir := t.TempDir()
	wl := filepath.Join(dir, "w.yaml")
	mustWrite(t, wl, []byte(`
requests: 40
arrival: {process: constant, rate: 400}
classes:
  - {name: good, share: 1, prompt_tokens: {value: 4}, output_tokens: {value: 2}}
  - {name: broken, share: 1, prompt_tokens: {value: 4}, output_tokens: {value: 2}, headers: {x-benchtest-fault: "500"}}
`), 0o644)
	js := filepath.Join(dir, "r.json")
	out, _, err := benchMain(t, "run", "--target", srv.HTTPURL, "--workload", wl, "--json", js, "--quiet")
	if err != nil {
		t.Fatal(err)
	}
	f, _ := os.Open(js)
	rep, err := report.ReadJSON(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	g, b := rep.Classes["good"], rep.Classes["broken"]
	if g.Completed != g.Requests || b.Completed != 0 || b.Violations.Error != b.Requests || g.Requests+b.Requests != 40 {
		t.Errorf("good %+v\nbroken %+v\n%s", g, b, out)
	}
}

func mustWrite(t *testing.T, path string, data []byte, perm os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, data, perm); err != nil {
		t.Fatal(err)
	}
}
