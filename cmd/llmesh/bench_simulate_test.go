package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestBenchSimulateJSON(t *testing.T) {
	dir := t.TempDir()
	wf := filepath.Join(dir, "w.yaml")
	if err := os.WriteFile(wf, []byte(`
name: tiny
seed: 3
duration: 20s
arrival: {process: poisson, rate: 4}
classes:
  - {name: interactive, priority: 0, share: 0.3, slo: {ttft: 500ms, tpot: 30ms},
     prompt_tokens: {kind: fixed, value: 256}, output_tokens: {kind: fixed, value: 32}}
  - {name: batch, priority: 10, share: 0.7, slo: {ttft: 5s, tpot: 100ms},
     prompt_tokens: {kind: fixed, value: 1024}, output_tokens: {kind: fixed, value: 128}}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, err := benchMain(t, "simulate", "--workload", wf, "--policies", "fifo,preemptive", "--loads", "0.5,1.2", "--max-inflight", "16", "--json", "-")
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	var doc struct {
		Saturation struct{ RPS float64 } `json:"saturation"`
		Runs       []struct {
			Policy  string  `json:"policy"`
			Load    float64 `json:"load"`
			Classes map[string]struct {
				GoodputRPS float64 `json:"goodput_rps"`
			} `json:"classes"`
		} `json:"runs"`
	}
	dec := json.NewDecoder(strings.NewReader(out))
	if err := dec.Decode(&doc); err != nil || dec.More() {
		t.Fatalf("stdout is not one JSON object (%v):\n%s", err, out)
	}
	if !(doc.Saturation.RPS > 0) || len(doc.Runs) != 4 {
		t.Fatalf("saturation %v, %d runs", doc.Saturation.RPS, len(doc.Runs))
	}
	for _, r := range doc.Runs {
		if math.Abs(r.Load-0.5) > 1e-9 && math.Abs(r.Load-1.2) > 1e-9 {
			t.Errorf("run %s has load %v", r.Policy, r.Load)
		}
		if r.Classes["batch"].GoodputRPS <= 0 {
			t.Errorf("%s at %v: no batch goodput", r.Policy, r.Load)
		}
	}
}

func TestBenchSimulateBadFlags(t *testing.T) {
	_, _, err := benchMain(t, "simulate", "--loads", "x,-1", "--max-per-request", "0", "--engine-policy", "lottery", "--duration", "-1s",
		"--max-prefill-tokens", "-5", "--reserve-urgent", "64", "--long-prefill-token-threshold", "-3", "--overload-release", "0.5", "--trace-format", "parquet")
	if exitCodeOf(err) != 2 {
		t.Fatalf("exit code %d (%v), want 2", exitCodeOf(err), err)
	}
	for _, want := range []string{`"x"`, `"-1"`, "--max-per-request", "--engine-policy", "--duration", "--max-prefill-tokens", "--reserve-urgent", "--long-prefill-token-threshold", "--overload-release", "--trace-format"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
	_, _, err = benchMain(t, "simulate", "--policies", "lottery", "--loads", "1")
	if exitCodeOf(err) != 2 || !strings.Contains(err.Error(), "lottery") {
		t.Errorf("unknown policy: %v", err)
	}
}

func FuzzParseLoads(f *testing.F) {
	for _, s := range []string{"", "1", "0.05,0.7,0.9,1.0,1.2", " 1 , 2", "x", "-1", "NaN", "Inf", "1e308,1e-308", ",,"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ls, err := parseLoads(s)
		if err != nil {
			return
		}
		for _, l := range ls {
			if !(l > 0) {
				t.Fatalf("parseLoads(%q) accepted %v", s, l)
			}
		}
	})
}

func TestBenchSimulateFleet(t *testing.T) {
	out, errOut, err := benchMain(t, "simulate", "--policies", "priority", "--loads", "1", "--duration", "10s",
		"--engines", "3", "--proxies", "2", "--routing", "pool", "--schedulers", "per-proxy", "--hop", "1ms", "--json", "-")
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	var doc struct {
		Engines    int     `json:"engines"`
		Proxies    int     `json:"proxies"`
		Routing    string  `json:"routing"`
		Schedulers string  `json:"schedulers"`
		HopMs      float64 `json:"hop_ms"`
		Runs       []struct {
			Sim struct {
				Endpoints []struct {
					Name            string  `json:"name"`
					BusyS           float64 `json:"busy_s"`
					KVPeak          float64 `json:"kv_peak"`
					CompletedTokens int64   `json:"completed_tokens"`
				} `json:"endpoints"`
				Imbalance float64 `json:"imbalance"`
			} `json:"simulation"`
		} `json:"runs"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if doc.Engines != 3 || doc.Proxies != 2 || doc.Routing != "pool" || doc.Schedulers != "per-proxy" || doc.HopMs != 1 || len(doc.Runs) != 1 {
		t.Fatalf("fleet fields: %+v", doc)
	}
	s := doc.Runs[0].Sim
	if len(s.Endpoints) != 3 || !(s.Imbalance >= 1) {
		t.Fatalf("endpoints %+v, imbalance %v", s.Endpoints, s.Imbalance)
	}
	for _, e := range s.Endpoints {
		if e.BusyS <= 0 || e.KVPeak <= 0 || e.CompletedTokens <= 0 {
			t.Errorf("engine %s did nothing: %+v", e.Name, e)
		}
	}
	_, _, err = benchMain(t, "simulate", "--engines", "0", "--proxies", "-1", "--routing", "random", "--prefix-weight", "-1", "--schedulers", "each", "--hop", "-1ms", "--rate", "5", "--loads", "1")
	if exitCodeOf(err) != 2 {
		t.Fatalf("exit code %d (%v), want 2", exitCodeOf(err), err)
	}
	for _, want := range []string{"--engines", "--proxies", `--routing: "random" must be one of endpoint-aware, pool, prefix-aware`, "--prefix-weight: -1", `--schedulers: "each"`, "--hop", "--rate"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
}

func TestBenchSimulateMemprofileAndParallel(t *testing.T) {
	path := filepath.Join(t.TempDir(), "heap.prof")
	_, errOut, err := benchMain(t, "simulate", "--policies", "fifo,priority", "--loads", "1", "--duration", "5s",
		"--engines", "2", "--parallel", "1", "--memprofile", path, "--brief")
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// go tool pprof reads a gzipped protocol buffer.
	if len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Fatalf("--memprofile wrote %d bytes that are not a gzipped profile", len(b))
	}
	_, _, err = benchMain(t, "simulate", "--policies", "fifo", "--loads", "1", "--parallel", "-1")
	if exitCodeOf(err) != 2 || !strings.Contains(err.Error(), "parallel: -1") {
		t.Errorf("--parallel -1: exit code %d, %v; want 2 and an error naming parallel", exitCodeOf(err), err)
	}
	_, _, err = benchMain(t, "simulate", "--policies", "fifo", "--loads", "1", "--memprofile", filepath.Join(t.TempDir(), "no", "such", "dir"))
	if err == nil || !strings.Contains(err.Error(), "--memprofile") {
		t.Errorf("unwritable --memprofile: %v, want an error naming the flag", err)
	}
}
