package envoyhost

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// The binaries under test: LLMESH_FILTER_SO and LLMESH_ENVOYHOST name
// prebuilt ones (make filter-host builds them once); otherwise the test
// builds both, the host into a cache directory keyed by its sources.
var (
	buildOnce           sync.Once
	soPath, hostPath    string
	buildErr, buildSkip error
)

func envoyModuleDir() (string, error) { return EnvoyModuleDir() }

func buildForBench(b *testing.B) (so, host string) { return build(b) }

func build(t testing.TB) (so, host string) {
	t.Helper()
	buildOnce.Do(func() {
		soPath, hostPath = os.Getenv("LLMESH_FILTER_SO"), os.Getenv("LLMESH_ENVOYHOST")
		if soPath == "" {
			soPath, buildErr = buildSO()
			if buildErr != nil {
				return
			}
		}
		if hostPath == "" {
			hostPath, buildErr = BuildHost()
			if errors.Is(buildErr, ErrNoCompiler) {
				buildSkip, buildErr = buildErr, nil
			}
		}
	})
	if buildSkip != nil {
		t.Skip(buildSkip)
	}
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return soPath, hostPath
}

// soDir is the temporary directory of a .so the test built, removed by
// TestMain.
var soDir string

func TestMain(m *testing.M) {
	code := m.Run()
	if p := closeDriven(); len(p) > 0 {
		fmt.Fprintf(os.Stderr, "the driven host:\n  %s\n", strings.Join(p, "\n  "))
		if code == 0 {
			code = 1
		}
	}
	if soDir != "" {
		os.RemoveAll(soDir)
	}
	os.Exit(code)
}

func buildSO() (string, error) {
	dir, err := os.MkdirTemp("", "llmesh-filter-so-")
	if err != nil {
		return "", err
	}
	soDir = dir
	return BuildSO("./cmd/llmesh-filter", dir)
}

// report is the host's JSON output.
type report struct {
	Streams      map[string]streamReport `json:"streams"`
	Stats        map[string]int64        `json:"stats"`
	Gauges       map[string]int64        `json:"gauges"`
	Violations   []string                `json:"violations"`
	Failures     []string                `json:"failures"`
	ConfigErrors []string                `json:"config_errors"`
	CAPI         map[string]int64        `json:"capi"`
	Logs         []struct {
		Level int    `json:"level"`
		Msg   string `json:"msg"`
	} `json:"logs"`
	Objects struct {
		RequestsCreated int64 `json:"requests_created"`
		RequestsFreed   int64 `json:"requests_freed"`
		ConfigsCreated  int64 `json:"configs_created"`
		ConfigsFreed    int64 `json:"configs_freed"`
	} `json:"objects"`
}

type streamReport struct {
	Ended        bool                              `json:"ended"`
	EndReason    string                            `json:"end_reason"`
	Completed    bool                              `json:"completed"`
	Destroyed    int                               `json:"destroyed"`
	DestroyState string                            `json:"destroy_state"`
	OverrideHost string                            `json:"override_host"`
	Metadata     map[string]map[string]interface{} `json:"metadata"`
	Events       []Event                           `json:"events"` // the driven mode's events, without their stream
}

// runHost runs one scenario in its own process.
func runHost(t *testing.T, so, host, scenario string) (*report, []byte) {
	t.Helper()
	cmd := exec.Command(host, so, scenario)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !(errors.As(err, &ee) && ee.ExitCode() == 1) {
		t.Fatalf("%s %s %s: %v\n%s", host, so, scenario, err, stderr.Bytes())
	}
	var r report
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatalf("host output is not its JSON report: %v\n%s\n%s", err, stdout.Bytes(), stderr.Bytes())
	}
	return &r, stdout.Bytes()
}

// TestScenarios runs every scenario under testdata/scenarios through the
// real .so and checks its expect lines, and for every scenario that the
// host saw no violation, no failed wait and every request and config
// finalized by Go.
func TestScenarios(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "scenarios", "*.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios: %v", err)
	}
	so, host := build(t)
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".txt")
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			exps, err := parseExpects(string(src))
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			r, raw := runHost(t, so, host, f)
			var problems []string
			for _, e := range exps {
				if p := e.check(r); p != "" {
					problems = append(problems, fmt.Sprintf("line %d: %s: %s", e.line, e.text, p))
				}
			}
			problems = append(problems, baseline(r, exps)...)
			if len(problems) > 0 {
				t.Errorf("%s:\n  %s\nreport:\n%s", f, strings.Join(problems, "\n  "), raw)
			}
		})
	}
}

// baseline is what every scenario must satisfy unless it says otherwise.
func baseline(r *report, exps []expect) []string {
	allow := map[string]bool{}
	for _, e := range exps {
		if e.op == "allow" {
			allow[e.args[0]] = true
		}
	}
	var p []string
	for _, v := range r.Violations {
		p = append(p, "violation: "+v)
	}
	for _, f := range r.Failures {
		p = append(p, "failed: "+f)
	}
	if !allow["config_errors"] {
		for _, c := range r.ConfigErrors {
			p = append(p, "config error: "+c)
		}
	}
	if n := r.Objects.RequestsCreated - r.Objects.RequestsFreed; n != 0 && !allow["leak"] {
		p = append(p, fmt.Sprintf("%d of %d requests were never finalized", n, r.Objects.RequestsCreated))
	}
	if n := r.Objects.ConfigsCreated - r.Objects.ConfigsFreed; n != 0 && !allow["leak"] {
		p = append(p, fmt.Sprintf("%d of %d filter configs were never finalized by Go", n, r.Objects.ConfigsCreated))
	}
	for _, l := range r.Logs {
		if l.Level >= 4 && !allow["error_logs"] && !strings.Contains(l.Msg, "not supported yet") {
			p = append(p, "error log: "+l.Msg)
		}
	}
	if !allow["panics"] {
		if n := r.Stats["golang.panic_error"]; n > 0 {
			p = append(p, fmt.Sprintf("the SDK recovered %d panics", n))
		}
		if n := r.Stats["llmesh.panics"]; n > 0 {
			p = append(p, fmt.Sprintf("llmesh.panics = %d", n))
		}
	}
	return p
}

// TestPortedSources fails when an Envoy version bump changes the C++ the
// host ports: the host must then be read against the new files.
func TestPortedSources(t *testing.T) {
	mod, err := envoyModuleDir()
	if err != nil {
		t.Skip(err)
	}
	want, err := os.ReadFile(filepath.Join("testdata", "ported.sha256"))
	if err != nil {
		t.Fatal(err)
	}
	var changed []string
	for _, line := range strings.Split(strings.TrimSpace(string(want)), "\n") {
		sum, path, ok := strings.Cut(line, "  ")
		if !ok {
			t.Fatalf("ported.sha256: bad line %q", line)
		}
		b, err := os.ReadFile(filepath.Join(mod, path))
		if err != nil {
			changed = append(changed, path+" (missing)")
			continue
		}
		got := sha256.Sum256(b)
		if hex.EncodeToString(got[:]) != sum {
			changed = append(changed, path)
		}
	}
	if len(changed) > 0 {
		t.Errorf("the Envoy sources the host ports changed in %s; re-read them against testkit/envoyhost/host, "+
			"then update testkit/envoyhost/testdata/ported.sha256:\n  %s", mod, strings.Join(changed, "\n  "))
	}
}

// BenchmarkThroughHost reports what the host measured for
// testdata/bench/*.txt: the worker thread's CPU time per response chunk
// (EncodeData through the SDK shim and two cgo crossings: the call into Go
// and the buffer copy back) and per request (every callback of one
// request on the worker, and the whole process's CPU including the
// admission goroutine, the scheduler and GC). Each run is one host
// process; b.N is not used.
func BenchmarkThroughHost(b *testing.B) {
	benchOut := map[string][]byte{}
	for _, kind := range []string{"sse", "grpc"} {
		b.Run(kind, func(b *testing.B) {
			out, ok := benchOut[kind]
			if !ok {
				// One host run per kind, however often the framework
				// calls this with a larger b.N.
				so, host := buildForBench(b)
				var err error
				out, err = exec.Command(host, so, filepath.Join("testdata", "bench", kind+".txt")).Output()
				if err != nil {
					b.Fatalf("%s: %v\n%s", host, err, out)
				}
				benchOut[kind] = out
			}
			var r struct {
				Bench []struct {
					Requests       int   `json:"requests"`
					ChunkCPU       int64 `json:"chunk_worker_cpu_ns"`
					ChunkWall      int64 `json:"chunk_wall_ns"`
					RequestCPU     int64 `json:"request_worker_cpu_ns"`
					RequestProcess int64 `json:"request_process_cpu_ns"`
				} `json:"bench"`
				Violations []string `json:"violations"`
			}
			if err := json.Unmarshal(out, &r); err != nil || len(r.Bench) == 0 {
				b.Fatalf("no bench report: %v\n%s", err, out)
			}
			if len(r.Violations) > 0 {
				b.Fatalf("violations: %v", r.Violations)
			}
			last := r.Bench[len(r.Bench)-1] // the first run warms up
			b.ReportMetric(float64(last.ChunkCPU), "cpu-ns/chunk")
			b.ReportMetric(float64(last.ChunkWall), "wall-ns/chunk")
			b.ReportMetric(float64(last.RequestCPU), "worker-cpu-ns/request")
			b.ReportMetric(float64(last.RequestProcess), "process-cpu-ns/request")
		})
	}
}
