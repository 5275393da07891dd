package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/llmesh/llmesh/bench/benchtest"
	"github.com/llmesh/llmesh/bench/report"
	"github.com/llmesh/llmesh/sim"
	"github.com/llmesh/llmesh/sim/simtest"
)

// TestBenchRunReplaysMooncakePrefixes: llmesh bench run --trace sends a
// Mooncake trace's prompts as text whose tokens agree exactly where the
// rows' hash_ids agree (the first 512-token blocks), so an engine's
// prefix cache would hit the same blocks.
func TestBenchRunReplaysMooncakePrefixes(t *testing.T) {
	dir := t.TempDir()
	tr := filepath.Join(dir, "t.jsonl")
	rows := `{"timestamp": 0, "input_length": 1200, "output_length": 3, "hash_ids": [1, 2, 3]}
{"timestamp": 10, "input_length": 1100, "output_length": 3, "hash_ids": [1, 2, 4]}
{"timestamp": 20, "input_length": 700, "output_length": 3, "hash_ids": [5, 2]}
`
	if err := os.WriteFile(tr, []byte(rows), 0o644); err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		prompts = map[int][]uint32{}
	)
	inner := benchtest.Handler(benchtest.Config{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req struct {
			Prompt    string `json:"prompt"`
			MaxTokens int    `json:"max_tokens"`
		}
		if json.Unmarshal(body, &req) == nil {
			ids := sim.Tokenize(req.Prompt)
			mu.Lock()
			prompts[len(ids)] = ids
			mu.Unlock()
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		inner.ServeHTTP(w, r)
	}))
	defer srv.Close()
	out, stderr, err := benchMain(t, "run", "--target", srv.URL, "--trace", tr, "--quiet")
	if err != nil {
		t.Fatalf("%v\n%s\n%s", err, out, stderr)
	}
	if !strings.Contains(out, "3 requests") {
		t.Errorf("output:\n%s", out)
	}
	a, b, c := prompts[1200], prompts[1100], prompts[700]
	if a == nil || b == nil || c == nil {
		t.Fatalf("prompt lengths seen: %d prompts, want 1200, 1100 and 700 tokens", len(prompts))
	}
	common := func(x, y []uint32) int {
		n := 0
		for n < min(len(x), len(y)) && x[n] == y[n] {
			n++
		}
		return n
	}
	if n := common(a, b); n != 1024 {
		t.Errorf("rows sharing hash_ids [1 2] share %d leading tokens, want 1024", n)
	}
	if n := common(a, c); n > 1 { // a chance equal first token at most
		t.Errorf("rows with different first hash ids share %d leading tokens", n)
	}
	_, _, err = benchMain(t, "run", "--target", srv.URL, "--trace", tr, "--trace-format", "parquet", "--quiet")
	if err == nil || !strings.Contains(err.Error(), "--trace-format") {
		t.Errorf("bad --trace-format: err = %v", err)
	}
	_, _, err = benchMain(t, "run", "--target", srv.URL, "--trace", filepath.Join(dir, "none.jsonl"), "--quiet")
	if err == nil || !strings.Contains(err.Error(), "--trace") {
		t.Errorf("missing trace: err = %v", err)
	}
}

// TestBenchRunEnginePrefixCounters: with --engine-metrics, bench run
// reports how much the engines' prefix-cache counters moved: against a
// real sim, a class with a shared system prompt hits after its first
// request, and the report says what the engine counted.
func TestBenchRunEnginePrefixCounters(t *testing.T) {
	s := simtest.Start(t, simtest.WithTimeScale(20))
	wl := filepath.Join(t.TempDir(), "w.yaml")
	if err := os.WriteFile(wl, []byte(`
requests: 12
arrival: {process: constant, rate: 4}
classes:
  - {name: chat, system_prompt_tokens: 512, prompt_tokens: {value: 20}, output_tokens: {value: 2}}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	js := filepath.Join(t.TempDir(), "r.json")
	out, stderr, err := benchMain(t, "run", "--target", s.HTTPURL, "--workload", wl, "--quiet", "--json", js, "--engine-metrics", s.HTTPURL+"/metrics")
	if err != nil {
		t.Fatalf("%v\n%s\n%s", err, out, stderr)
	}
	f, err := os.Open(js)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := report.ReadJSON(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	p := rep.EnginePrefixCache
	// 12 prompts of 532 tokens; each after the first finds the system
	// prompt's 32 blocks (512 tokens).
	if p == nil || p.Engines != 1 || p.QueriedTokens != 12*532 || p.HitTokens != 11*512 {
		t.Fatalf("engine prefix cache %+v (note %q), want 1 engine, %d queried, %d hit", p, rep.EnginePrefixCacheNote, 12*532, 11*512)
	}
	if !strings.Contains(out, "prefix cache (the engines' counters, 1 engines, warm-up included): 5632 of 6384 queried tokens hit (88.2%)") {
		t.Errorf("table output:\n%s", out)
	}
	_, _, err = benchMain(t, "run", "--target", s.HTTPURL, "--workload", wl, "--quiet", "--engine-metrics", "localhost:9/metrics")
	if err == nil || !strings.Contains(err.Error(), `--engine-metrics: "localhost:9/metrics" must be an http:// or https:// URL`) {
		t.Errorf("bad URL: %v", err)
	}
}

// TestBenchRunTraceSpeed: --trace-speed S replays a trace S times faster
// (rows 4 s apart arrive 0.4 s apart at S = 10), and is refused without
// --trace or with a speed that is not positive, naming the flag.
func TestBenchRunTraceSpeed(t *testing.T) {
	dir := t.TempDir()
	tr := filepath.Join(dir, "t.jsonl")
	rows := `{"timestamp": 0, "input_length": 100, "output_length": 2, "hash_ids": [1]}
{"timestamp": 4000, "input_length": 100, "output_length": 2, "hash_ids": [1]}
{"timestamp": 8000, "input_length": 100, "output_length": 2, "hash_ids": [2]}
`
	if err := os.WriteFile(tr, []byte(rows), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(benchtest.Handler(benchtest.Config{}))
	defer srv.Close()
	js := filepath.Join(dir, "r.json")
	out, stderr, err := benchMain(t, "run", "--target", srv.URL, "--trace", tr, "--trace-speed", "10", "--quiet", "--json", js)
	if err != nil {
		t.Fatalf("%v\n%s\n%s", err, out, stderr)
	}
	var rep struct {
		Completed int     `json:"completed"`
		Duration  float64 `json:"duration"`
	}
	b, err := os.ReadFile(js)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	// At the trace's own pace the last row is sent 8 s in; ten times
	// faster, 0.8 s in.
	if rep.Completed != 3 || rep.Duration >= 4 {
		t.Errorf("completed %d in %.2f s, want 3 in well under the trace's own 8 s", rep.Completed, rep.Duration)
	}
	for _, args := range [][]string{
		{"run", "--target", srv.URL, "--rate", "5", "--requests", "2", "--trace-speed", "2", "--quiet"},
		{"run", "--target", srv.URL, "--trace", tr, "--trace-speed", "0", "--quiet"},
		{"run", "--target", srv.URL, "--trace", tr, "--trace-speed", "-1", "--quiet"},
	} {
		_, stderr, err := benchMain(t, args...)
		if err == nil || !strings.Contains(err.Error()+stderr, "--trace-speed") {
			t.Errorf("%v: err %v, stderr %q; want an error naming --trace-speed", args, err, stderr)
		}
	}
}
