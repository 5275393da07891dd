package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// `bench simulate --seeds N --rate R` writes every seed's result at the
// same fixed rate, and bench compare reads the file as N units paired seed
// by seed with another build's (or policy's) file.
func TestBenchSimulateSeedsCompare(t *testing.T) {
	dir := t.TempDir()
	wf := filepath.Join(dir, "w.yaml")
	mustWrite(t, wf, []byte(`
name: tiny
seed: 3
duration: 20s
arrival: {process: poisson, rate: 4}
classes:
  - {name: interactive, priority: 0, share: 0.3, slo: {ttft: 500ms, tpot: 30ms},
     prompt_tokens: {kind: fixed, value: 256}, output_tokens: {kind: fixed, value: 32}}
  - {name: batch, priority: 10, share: 0.7, slo: {ttft: 5s, tpot: 100ms},
     prompt_tokens: {kind: fixed, value: 1024}, output_tokens: {kind: fixed, value: 128}}
`), 0o644)
	sim := func(name string, args ...string) string {
		t.Helper()
		path := filepath.Join(dir, name)
		_, errOut, err := benchMain(t, append([]string{"simulate", "--workload", wf, "--rate", "6", "--seeds", "3", "--json", path, "--max-inflight", "16"}, args...)...)
		if err != nil {
			t.Fatalf("%v\n%s", err, errOut)
		}
		return path
	}
	fifo := sim("fifo.json", "--policies", "fifo")
	pre := sim("pre.json", "--policies", "preemptive")
	var doc struct {
		Seeds   []int64 `json:"seeds"`
		Results []struct {
			Runs []struct {
				Policy     string  `json:"policy"`
				Seed       int64   `json:"seed"`
				ArrivalRPS float64 `json:"arrival_rps"`
			} `json:"runs"`
		} `json:"results"`
	}
	data, err := os.ReadFile(fifo)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &doc); err != nil || len(doc.Seeds) != 3 || len(doc.Results) != 3 {
		t.Fatalf("seeded result (%v): %d seeds, %d results", err, len(doc.Seeds), len(doc.Results))
	}
	for i, r := range doc.Results {
		if len(r.Runs) != 1 || r.Runs[0].Seed != 3+int64(i) || doc.Seeds[i] != 3+int64(i) || r.Runs[0].ArrivalRPS != 6 {
			t.Errorf("results[%d]: seed %d, runs %+v; want one fifo run of seed %d at 6 req/s", i, doc.Seeds[i], r.Runs, 3+i)
		}
	}
	out, stderr, code := runCompare("bench", "compare", "--json", "-", fifo, pre)
	if code != 0 {
		t.Fatalf("compare: exit %d, %s", code, stderr)
	}
	var cmp struct {
		Units int `json:"units"`
	}
	if err := json.Unmarshal([]byte(out), &cmp); err != nil || cmp.Units != 3 {
		t.Errorf("compare over seeds (%v): %d units, want 3\n%s", err, cmp.Units, out)
	}
	// Other seeds do not pair.
	other := sim("other.json", "--policies", "preemptive", "--seed", "100")
	if _, stderr, code := runCompare("bench", "compare", fifo, other); code != 2 || !strings.Contains(stderr, "arm A ran seed 3, arm B seed 100") {
		t.Errorf("unpaired seeds: exit %d, %s", code, stderr)
	}
	if _, _, err := benchMain(t, "simulate", "--seeds", "0"); exitCodeOf(err) != 2 || !strings.Contains(err.Error(), "--seeds: 0") {
		t.Errorf("--seeds 0: %v", err)
	}
}

// FuzzLoadCompareReports: whatever a results file holds, reading it never
// panics, and a file it accepts yields one report per unit (one per seed
// for a --seeds file), none of them nil.
func FuzzLoadCompareReports(f *testing.F) {
	f.Add([]byte(`{"valid": true, "classes": {"c": {}}}`), "", 0.0, false)
	f.Add([]byte(`{"runs": [{"policy": "fifo", "load": 1, "classes": {}}, {"policy": "edf", "load": 1}]}`), "fifo", 1.0, true)
	f.Add([]byte(`{"seeds": [1, 2], "results": [{"runs": [{"policy": "fifo"}]}, {"runs": [{"policy": "fifo"}]}]}`), "fifo", 0.0, false)
	f.Add([]byte(`{"seeds": [1], "results": [{"runs": []}, {"runs": null}]}`), "", 0.0, false)
	f.Add([]byte(`{"results": 3}`), "", 0.0, false)
	f.Add([]byte(`{"seeds": [], "results": []}`), "", 0.0, false)
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte, policy string, load float64, loadSet bool) {
		path := filepath.Join(dir, "r.json")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		in, err := loadCompareReports(path, policy, load, loadSet)
		if err != nil {
			return
		}
		reps, seeds := in.reports, in.seeds
		if len(reps) == 0 || seeds != nil && len(seeds) != len(reps) {
			t.Fatalf("%d reports, %d seeds", len(reps), len(seeds))
		}
		for i, r := range reps {
			if r == nil {
				t.Fatalf("report %d is nil", i)
			}
		}
	})
}
