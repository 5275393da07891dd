package demo_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/llmesh/llmesh/bench/workload"
	"github.com/llmesh/llmesh/cmd/llmesh/demo"
	"github.com/llmesh/llmesh/cmd/llmesh/demo/stack"
	"github.com/llmesh/llmesh/cmd/llmesh/gatewayproc"
)

// runGateway is what cmd/llmesh hands the demo: `llmesh gateway`'s process
// wiring.
func runGateway(ctx context.Context, gc stack.GatewayConfig) error {
	return gatewayproc.Run(ctx, gatewayproc.Config{ConfigPath: gc.ConfigPath, Listen: gc.Listen, Admin: gc.Admin,
		Drain: gc.Drain, Logger: gc.Logger, Ready: func(data, _ net.Addr) { gc.Ready(data) }})
}

// tiny is a short two-class workload: short prompts and outputs so that
// every request ends well within the test's time.
const tiny = `
name: tiny
primary: interactive=ttft_p99_ms
profile: llama3-8b-h200
model: llama3-8b-h200
protocol: openai-completions
seed: 7
duration: 1s
warmup: {duration: 200ms}
arrival: {process: poisson, rate: 20}
classes:
  - name: interactive
    priority: 0
    share: 0.3
    slo: {ttft: 500ms, tpot: 50ms}
    prompt_tokens: {kind: uniform, min: 32, max: 256}
    output_tokens: {kind: uniform, min: 4, max: 16}
    headers: {x-llmesh-class: interactive}
  - name: batch
    priority: 10
    share: 0.7
    slo: {ttft: 5s, tpot: 100ms}
    prompt_tokens: {kind: uniform, min: 256, max: 1024}
    output_tokens: {kind: uniform, min: 8, max: 32}
    headers: {x-llmesh-class: batch}
`

func tinyWorkload(t *testing.T) *workload.Workload {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tiny.yaml")
	if err := os.WriteFile(path, []byte(tiny), 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := workload.LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// Run end to end with one short A/B pair: both arms run through the
// embedded gateway to a simulated engine, the result has both arms' reports
// and the engine timing, the files are written, and nothing is left running.
func TestRunQuickAB(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := demo.Run(ctx, demo.Options{
		OutDir: out, Quick: true, Workload: tinyWorkload(t), Repeats: 1, Duration: time.Second, Load: 0.3,
		Bounds: demo.Bounds{MaxPrefillTokens: 2048, ReserveUrgent: 2}, Gateway: runGateway,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.AB == nil || res.AB.A != "fifo" || res.AB.B != "preemptive" || res.AB.Repeats != 1 {
		t.Fatalf("A/B result %+v", res.AB)
	}
	if res.AB.Primary["interactive"] != "ttft_p99_ms" || res.AB.PrimaryFrom != "workload tiny" {
		t.Errorf("primary %v from %q, want the workload's interactive=ttft_p99_ms", res.AB.Primary, res.AB.PrimaryFrom)
	}
	arms := map[string]int{}
	for _, r := range res.AB.Runs {
		arms[r.Arm]++
		if r.Report == nil {
			t.Fatalf("run %s %d has no report", r.Arm, r.Repeat)
		}
		for _, class := range []string{"interactive", "batch"} {
			c, ok := r.Report.Classes[class]
			if !ok || c.Completed == 0 {
				t.Errorf("run %s: class %s completed nothing (%+v)", r.Arm, class, c)
			}
		}
	}
	if arms["A"] != 1 || arms["B"] != 1 {
		t.Fatalf("runs per arm %v, want one each", arms)
	}
	for _, policy := range []string{"fifo", "preemptive"} {
		ts := res.Engine[policy]
		// Steps last milliseconds: the modelled time must be a small
		// multiple of the step count, not a stray long timer.
		if len(ts) != 1 || ts[0].Steps < 10 || ts[0].Model <= 0 || ts[0].Model > time.Duration(ts[0].Steps)*time.Second {
			t.Errorf("engine timing of %s: %+v", policy, ts)
		}
	}
	for _, name := range []string{"ab.json", "report.md", "report.html", "mesh-fifo.yaml", "mesh-preemptive.yaml", "mesh-envoy.yaml"} {
		if fi, err := os.Stat(filepath.Join(out, name)); err != nil || fi.Size() == 0 {
			t.Errorf("%s: %v", name, err)
		}
	}
	mesh, err := os.ReadFile(filepath.Join(out, "mesh-preemptive.yaml"))
	if err != nil || !strings.Contains(string(mesh), "max_prefill_tokens: 2048") || !strings.Contains(string(mesh), "reserve_urgent: 2") {
		t.Errorf("mesh-preemptive.yaml lacks the admission bounds (%v):\n%s", err, mesh)
	}
	for _, f := range res.Files {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("listed file: %v", err)
		}
	}
}

func TestRunRefusesUnwritableOutDir(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := demo.Run(context.Background(), demo.Options{OutDir: filepath.Join(file, "sub"), Workload: tinyWorkload(t), Gateway: runGateway})
	if err == nil {
		t.Fatal("Run with an output directory under a file succeeded")
	}
}

// previous fills dir with the outputs of an earlier demo and returns them.
func previous(t *testing.T, dir string) map[string]string {
	t.Helper()
	old := map[string]string{"report.html": "<p>old</p>", "report.md": "# old", "ab.json": `{"valid": true, "runs": []}`}
	for name, body := range old {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return old
}

// leftAsWas checks that dir holds exactly the earlier outputs (and the mesh
// files a run writes), no leftover temporary file among them.
func leftAsWas(t *testing.T, dir string, old map[string]string, allowed ...string) {
	t.Helper()
	for name, body := range old {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || string(got) != body {
			t.Errorf("%s was overwritten (%v): %q", name, err, got)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if _, ok := old[e.Name()]; !ok && !slices.Contains(allowed, e.Name()) {
			t.Errorf("unexpected file %s in the output directory", e.Name())
		}
	}
}

// A mistyped policy is refused before anything is written: the previous
// report stays whole instead of becoming an empty "valid" one.
func TestRunUnknownPolicyWritesNothing(t *testing.T) {
	out := t.TempDir()
	old := previous(t, out)
	res, err := demo.Run(context.Background(), demo.Options{OutDir: out, Workload: tinyWorkload(t), A: "nosuch", B: "alsonot", Gateway: runGateway})
	if err == nil || res != nil {
		t.Fatalf("Run with unknown policies: %v, %+v", err, res)
	}
	for _, want := range []string{`arm A`, `"nosuch" is not a known policy`, `arm B`, `"alsonot"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	leftAsWas(t, out, old)
	if err := (demo.Options{Workload: tinyWorkload(t), Gateway: runGateway}).CheckArm("edf"); err != nil {
		t.Errorf("CheckArm(edf): %v", err)
	}
}

// An A/B that fails part way (the candidate's gateway does not start)
// replaces none of the previous outputs and does not claim to be valid.
func TestRunFailedArmKeepsPreviousOutputs(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	out := t.TempDir()
	old := previous(t, out)
	failB := func(ctx context.Context, gc stack.GatewayConfig) error {
		if strings.Contains(gc.ConfigPath, "preemptive") {
			return errors.New("gateway refused to start")
		}
		return runGateway(ctx, gc)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := demo.Run(ctx, demo.Options{OutDir: out, Quick: true, Workload: tinyWorkload(t), Repeats: 1, Duration: 500 * time.Millisecond, Load: 0.3, Gateway: failB})
	if err == nil || !strings.Contains(err.Error(), "gateway refused to start") {
		t.Fatalf("Run with a failing arm: %v", err)
	}
	if res == nil || res.AB == nil || res.AB.Valid || len(res.Files) != 0 {
		t.Fatalf("result of a failed A/B: %+v", res)
	}
	leftAsWas(t, out, old, "mesh-envoy.yaml", "mesh-fifo.yaml", "mesh-preemptive.yaml")
}

// --max-lag and --retries reach every run: a lag budget no run can keep
// makes each run invalid, the pair is run again once, and the A/B is
// inconclusive, listing the discarded attempt.
func TestRunMaxLagAndRetries(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := demo.Run(ctx, demo.Options{OutDir: out, Quick: true, Workload: tinyWorkload(t), Repeats: 1,
		Duration: 500 * time.Millisecond, Load: 0.3, MaxLag: time.Nanosecond, Retries: 1, Gateway: runGateway})
	if err != nil {
		t.Fatal(err)
	}
	if res.AB.Valid || len(res.AB.Retried) != 1 || len(res.AB.Runs) != 2 {
		t.Fatalf("valid %v, %d retried, %d runs; want invalid, 1 retried, 2 runs", res.AB.Valid, len(res.AB.Retried), len(res.AB.Runs))
	}
	if r := res.AB.Retried[0]; r.Repeat != 0 || r.Attempt != 1 || len(r.Reasons) == 0 || !strings.Contains(strings.Join(r.Reasons, "; "), "0.000 ms") {
		t.Errorf("retry %+v does not name the 1 ns lag budget", r)
	}
	if !strings.Contains(res.AB.Verdict, "nconclusive") {
		t.Errorf("verdict %q, want inconclusive", res.AB.Verdict)
	}
}
