package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/llmesh/llmesh/bench/benchtest"
	"github.com/llmesh/llmesh/bench/provenance"
)

type provDoc struct {
	Provenance *provenance.Provenance `json:"provenance"`
}

func readProv(t *testing.T, path string) *provenance.Provenance {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d provDoc
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatal(err)
	}
	if d.Provenance == nil {
		t.Fatalf("%s has no provenance", path)
	}
	return d.Provenance
}

// bench simulate (one seed and --seeds), bench run and bench compare record
// the build, the input files, the seeds and the host; the markdown shows it.
func TestBenchProvenance(t *testing.T) {
	dir := t.TempDir()
	wf := filepath.Join(dir, "w.yaml")
	mustWrite(t, wf, []byte(tinySimWorkload), 0o644)
	sum, err := provenance.FileSHA256(wf)
	if err != nil {
		t.Fatal(err)
	}
	self := provenance.Self()
	check := func(name string, p *provenance.Provenance, seeds ...int64) {
		t.Helper()
		if p.Builds["self"] != self || p.Host.Cores < 1 || p.Host.OS == "" {
			t.Errorf("%s: builds %v host %+v", name, p.Builds, p.Host)
		}
		if got := p.Files["workload "+wf]; got != sum {
			t.Errorf("%s: workload hash %q, want %q (files %v)", name, got, sum, p.Files)
		}
		if len(p.Seeds) != len(seeds) || len(seeds) > 0 && p.Seeds[0] != seeds[0] {
			t.Errorf("%s: seeds %v, want %v", name, p.Seeds, seeds)
		}
	}
	one, many := filepath.Join(dir, "one.json"), filepath.Join(dir, "many.json")
	for _, c := range []struct {
		path  string
		seeds []string
	}{{one, nil}, {many, []string{"--seeds", "2"}}} {
		args := append([]string{"simulate", "--workload", wf, "--rate", "6", "--max-inflight", "16", "--policies", "fifo", "--duration", "5s", "--json", c.path}, c.seeds...)
		if _, errOut, err := benchMain(t, args...); err != nil {
			t.Fatalf("%v\n%s", err, errOut)
		}
	}
	check("simulate", readProv(t, one), 3)
	check("simulate --seeds", readProv(t, many), 3, 4)

	cj := filepath.Join(dir, "cmp.json")
	md, _, err := benchMain(t, "compare", many, many, "--json", cj)
	if err != nil {
		t.Fatal(err)
	}
	p := readProv(t, cj)
	if p.Builds["A"] != self || p.Builds["B"] != self || len(p.Seeds) != 2 || p.Files["A "+many] == "" {
		t.Errorf("compare provenance: %+v", p)
	}
	if !strings.Contains(md, "<summary>provenance</summary>") {
		t.Errorf("compare summary lacks the provenance:\n%s", md)
	}

	srv := benchtest.Start(t, benchtest.Config{})
	rl := filepath.Join(dir, "run.yaml")
	mustWrite(t, rl, []byte("seed: 9\nrequests: 10\narrival: {rate: 200}\nmax_schedule_lag_p99: 1s\nclasses: [{name: default, prompt_tokens: {value: 16}, output_tokens: {value: 4}, send_priority: false}]\n"), 0o644)
	rj, rm := filepath.Join(dir, "run.json"), filepath.Join(dir, "run.md")
	if _, errOut, err := benchMain(t, "run", "--workload", rl, "--target", srv.HTTPURL, "--json", rj, "--markdown", rm, "--quiet"); err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	p = readProv(t, rj)
	if p.Builds["self"] != self || p.Files["workload "+rl] == "" || len(p.Seeds) != 1 || p.Seeds[0] != 9 {
		t.Errorf("bench run provenance: %+v", p)
	}
	if b, _ := os.ReadFile(rm); !strings.Contains(string(b), "| seeds | 9 |") {
		t.Errorf("bench run markdown lacks the provenance:\n%s", b)
	}
}
