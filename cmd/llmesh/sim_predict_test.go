package main

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

// predictMS runs `llmesh sim predict args... --json -` and returns its ms.
func predictMS(t *testing.T, args ...string) float64 {
	t.Helper()
	out, errOut, code := runMain(append([]string{"sim", "predict", "--json", "-"}, args...)...)
	if code != 0 {
		t.Fatalf("sim predict %q: exit %d: %s", args, code, errOut)
	}
	var v struct {
		MS float64 `json:"ms"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("sim predict %q: %v in %q", args, err, out)
	}
	return v.MS
}

// TestSimPredictCached: a prefill after a cached prefix is predicted by the
// engine's timing model near what the H200 measured on points the fit
// left out, costs more than the same prefill from an empty cache, and the
// flag's misuse is a usage error naming it.
func TestSimPredictCached(t *testing.T) {
	for _, c := range []struct {
		model         string
		prefill, cach string
		measured      float64 // held-out points of calibration/h200-prefix-cached.jsonl
	}{
		{"qwen2.5-7b-h200", "1280", "30000", 95.20},
		{"llama3-8b-h200", "6144", "20000", 396.07},
		{"llama3-8b-h200", "3072", "12000", 154.10},
	} {
		got := predictMS(t, "--model", c.model, "--prefill", c.prefill, "--cached", c.cach)
		if e := math.Abs(got-c.measured) / c.measured; e > 0.10 {
			t.Errorf("%s prefill %s after %s: %.2f ms, measured %.2f (%.1f%% off)", c.model, c.prefill, c.cach, got, c.measured, 100*e)
		}
		if empty := predictMS(t, "--profile", c.model, "--prefill", c.prefill); empty >= got {
			t.Errorf("%s prefill %s: %.2f ms from an empty cache, not less than %.2f after %s cached", c.model, c.prefill, empty, got, c.cach)
		}
	}
	if a, b := predictMS(t, "--prefill", "2048"), predictMS(t, "--prefill", "2048", "--cached", "0"); a != b {
		t.Errorf("--cached 0 changed the prediction: %v vs %v", a, b)
	}
	out, _, code := runMain("sim", "predict", "--prefill", "2048", "--cached", "16384")
	if code != 0 || !strings.Contains(out, "prefill of 2048 tokens after 16384 cached: ") || !strings.HasSuffix(out, " ms\n") {
		t.Errorf("text output %q (exit %d)", out, code)
	}
	wantUsage(t, mainErr("sim", "predict", "--cached", "4096"), "--cached", "--prefill")
	wantUsage(t, mainErr("sim", "predict", "--prefill", "100", "--cached", "-1"), "--cached: -1")
	wantUsage(t, mainErr("sim", "predict", "--prefill", "-5", "--cached", "-1"), "--prefill: -5", "--cached: -1")
	wantUsage(t, mainErr("sim", "predict", "--prefill", "100", "--cached", "1000000"), "step too large")
	wantUsage(t, mainErr("sim", "predict", "--model", "llama3-70b-h200", "--profile", "llama3-8b-h200", "--prefill", "1"), "--model", "--profile")
	wantUsage(t, mainErr("sim", "predict", "--model", "nope", "--prefill", "1"), "--model", `"nope"`)
}
