package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/llmesh/llmesh/bench/result"
	"github.com/llmesh/llmesh/testkit/proctest"
)

var gatewayRE = regexp.MustCompile(`gateway listening on (\S+) \(admin (\S+)\)`)

// startSim runs a real-time sim with HTTP and gRPC listeners on free ports
// and waits until it answers /health.
func startSim(t *testing.T, name string, extra ...string) *proctest.Sim {
	t.Helper()
	return proctest.StartSim(t, llmesh(t), name, extra...)
}

// gatewayProc is a running `llmesh gateway`.
type gatewayProc struct {
	*proctest.Proc
	// Addr is the data plane's host:port, Admin the admin listener's.
	Addr, Admin string
}

// URL is the data plane's HTTP base.
func (g *gatewayProc) URL() string { return "http://" + g.Addr }

// metrics returns the admin /metrics text.
func (g *gatewayProc) metrics(t *testing.T) string {
	t.Helper()
	return proctest.MustGet(t, "http://"+g.Admin+"/metrics")
}

// startGateway runs `llmesh gateway args...` with data and admin listeners
// on free ports (args must not set --listen or --admin) and waits for
// /readyz.
func startGateway(t *testing.T, name string, args ...string) *gatewayProc {
	t.Helper()
	args = append([]string{"gateway", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"}, args...)
	p := start(t, name, args...)
	m := p.WaitOutput(t, gatewayRE)
	g := &gatewayProc{Proc: p, Addr: m[1], Admin: m[2]}
	proctest.WaitHTTP(t, "http://"+g.Admin+"/readyz", p)
	return g
}

// benchRun is one `llmesh bench run`: its report and per-request records.
type benchRun struct {
	Report  *result.Report
	Records []result.Record
	Output  string
}

// runBench runs `llmesh bench run` against target with the given flags
// (plus report files in a temporary directory) and fails the test when it
// exits non-zero.
func runBench(t *testing.T, target string, flags ...string) *benchRun {
	t.Helper()
	b, err := tryBench(llmesh(t), t.TempDir(), target, flags...)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// tryBench is runBench for goroutines other than the test's: it runs the
// llmesh binary bin, writes its reports into dir and returns what went
// wrong.
func tryBench(bin, dir, target string, flags ...string) (*benchRun, error) {
	jsonPath, jsonlPath := filepath.Join(dir, "report.json"), filepath.Join(dir, "records.jsonl")
	// --max-lag: the harness's own schedule lag on a loaded 2-core machine
	// says nothing about the system under test; these runs check
	// correctness, not latency.
	args := append([]string{"bench", "run", "--target", target, "--quiet", "--max-lag", "1h",
		"--json", jsonPath, "--jsonl", jsonlPath}, flags...)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := proctest.Command(ctx, bin, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("llmesh %s: %w\n%s", strings.Join(args, " "), err, out.String())
	}
	b := &benchRun{Output: out.String()}
	raw, err := os.ReadFile(jsonPath)
	if err != nil {
		return nil, err
	}
	b.Report = new(result.Report)
	if err := json.Unmarshal(raw, b.Report); err != nil {
		return nil, fmt.Errorf("report %s: %w", jsonPath, err)
	}
	f, err := os.Open(jsonlPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 16<<20)
	for sc.Scan() {
		var r result.Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("records %s: %w", jsonlPath, err)
		}
		b.Records = append(b.Records, r)
	}
	return b, sc.Err()
}

// checkAllOK checks that every one of want requests completed with exactly
// maxTokens output tokens, with TTFT and TPOT measured, and that the engine's
// ground truth came back through the proxy.
func (b *benchRun) checkAllOK(t *testing.T, want, maxTokens int) {
	t.Helper()
	r := b.Report
	if r.Completed != want || r.Failed != 0 || r.NumPrompts != want {
		t.Fatalf("report: num_prompts %d, completed %d, failed %d (requests %v); want %d completed, 0 failed\n%s",
			r.NumPrompts, r.Completed, r.Failed, r.Requests, want, b.Output)
	}
	if r.TotalOutputTokens != want*maxTokens {
		t.Errorf("report: total_output_tokens %d, want %d×%d", r.TotalOutputTokens, want, maxTokens)
	}
	if r.MeanTTFTMs <= 0 || r.MeanTPOTMs <= 0 {
		t.Errorf("report: mean_ttft_ms %v, mean_tpot_ms %v; want both > 0", r.MeanTTFTMs, r.MeanTPOTMs)
	}
	if r.Overall == nil || r.Overall.TTFTMs.N != want || r.Overall.TPOTMs.N != want {
		t.Errorf("report: overall TTFT/TPOT sample counts %+v; want %d each", r.Overall, want)
	}
	if len(b.Records) != want {
		t.Fatalf("%d records, want %d", len(b.Records), want)
	}
	for _, rec := range b.Records {
		if rec.Status != result.StatusOK || rec.OutputTokens != maxTokens || rec.FirstTokenNS == 0 {
			t.Errorf("record %d: status %s, output_tokens %d (want %d), first_token_ns %d, error %q",
				rec.Index, rec.Status, rec.OutputTokens, maxTokens, rec.FirstTokenNS, rec.Error)
		}
		if rec.Engine == nil || rec.Engine.FirstTokenNS < rec.Engine.ArrivalNS || rec.Engine.FinishNS < rec.Engine.FirstTokenNS {
			t.Errorf("record %d: engine ground truth %+v missing or out of order", rec.Index, rec.Engine)
		}
	}
}

// maxOverlap is the largest number of intervals [start, end] open at one
// instant.
func maxOverlap(starts, ends []int64) int {
	type ev struct {
		at    int64
		delta int
	}
	evs := make([]ev, 0, 2*len(starts))
	for i := range starts {
		evs = append(evs, ev{starts[i], 1}, ev{ends[i], -1})
	}
	// Ends sort before starts at the same instant: touching intervals do
	// not overlap.
	sort.Slice(evs, func(i, j int) bool {
		if evs[i].at != evs[j].at {
			return evs[i].at < evs[j].at
		}
		return evs[i].delta < evs[j].delta
	})
	n, peak := 0, 0
	for _, e := range evs {
		n += e.delta
		peak = max(peak, n)
	}
	return peak
}
