package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/llmesh/llmesh/bench/result"
)

// writeReports writes one bench run report per value of interactive P99 TTFT.
func writeReports(t *testing.T, dir, arm string, ttft []float64) string {
	t.Helper()
	var paths []string
	for i, v := range ttft {
		rep := result.Report{Valid: true, Classes: map[string]*result.ClassReport{
			"interactive": {TTFTMs: result.Percentiles{P99: v}, GoodputRPS: 1, SLOAttainment: 1},
		}}
		data, err := json.Marshal(rep)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, arm+string(rune('0'+i))+".json")
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	return strings.Join(paths, ",")
}

// runCompare runs llmesh and returns stdout, the error's text and the exit code.
func runCompare(args ...string) (string, string, int) {
	var o, e bytes.Buffer
	err := Main(context.Background(), args, &o, &e)
	code := 0
	if err != nil {
		code = exitError
		var ec *exitCode
		if errors.As(err, &ec) {
			code = ec.code
		}
		e.WriteString(err.Error())
	}
	return o.String(), e.String(), code
}

func TestBenchCompareGate(t *testing.T) {
	dir := t.TempDir()
	a := writeReports(t, dir, "a", []float64{100, 120, 90, 110})
	b := writeReports(t, dir, "b", []float64{112, 133, 101, 122})
	out := filepath.Join(dir, "cmp.json")
	gate := "interactive.ttft_p99_ms>+5%"

	stdout, stderr, code := runCompare("bench", "compare", "--primary", "interactive=ttft_p99_ms", "--json", out, a, b, "--fail-on", gate)
	if code != 3 || !strings.Contains(stderr, "gate breached: "+gate) || !strings.Contains(stdout, "verdict: **worse**") {
		t.Fatalf("breach: exit %d, stdout %q, stderr %q; want exit 3", code, stdout, stderr)
	}
	var got struct {
		Verdict string `json:"verdict"`
		Gates   []struct {
			Breached bool `json:"breached"`
		} `json:"gates"`
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &got); err != nil || got.Verdict != "worse" || len(got.Gates) != 1 || !got.Gates[0].Breached {
		t.Fatalf("json: %v %+v", err, got)
	}

	if _, stderr, code := runCompare("bench", "compare", "--fail-on", gate, a, a); code != 0 {
		t.Fatalf("A/A: exit %d, stderr %q; want 0", code, stderr)
	}

	// Bad input writes nothing and names every problem.
	fresh := filepath.Join(dir, "none.json")
	_, stderr, code = runCompare("bench", "compare", "--json", fresh, "--fail-on", "ttft>5", "--primary", "x", a)
	if code != 2 || !strings.Contains(stderr, "--fail-on") || !strings.Contains(stderr, "--primary[0]") || !strings.Contains(stderr, "want two arguments") {
		t.Fatalf("bad input: exit %d, stderr %q; want 2", code, stderr)
	}
	if _, err := os.Stat(fresh); !os.IsNotExist(err) {
		t.Fatalf("bad input wrote %s", fresh)
	}
	if _, stderr, code := runCompare("bench", "compare", a, b+","+a); code != 2 || !strings.Contains(stderr, "arm A has 4 units, arm B 8") {
		t.Fatalf("unpaired: exit %d, stderr %q", code, stderr)
	}
}
