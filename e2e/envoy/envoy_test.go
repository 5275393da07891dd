package envoy_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/llmesh/llmesh/api/llmv1"
	"github.com/llmesh/llmesh/testkit/proctest"
)

// The real-Envoy test needs an Envoy binary with the contrib extensions
// (the golang filter), v1.36 to match the SDK in go.mod.
const envoyMissing = "ENVOY_BIN is not set: this test needs an Envoy contrib v1.36 binary " +
	"(for example `docker cp $(docker create envoyproxy/envoy:contrib-v1.36.2):/usr/local/bin/envoy .` " +
	"then ENVOY_BIN=$PWD/envoy); it builds llmesh-filter.so, llmesh (sim, control) itself"

// stack is sim + Envoy with the .so, for one test.
type stack struct {
	dir, so, llmesh      string
	simHTTP, simGRPC     string
	envoyAddr, adminAddr string
	accessLog            string
	envoy                *proctest.Proc
}

func newStack(t *testing.T) *stack {
	t.Helper()
	envoyBin := os.Getenv("ENVOY_BIN")
	if envoyBin == "" {
		t.Skip(envoyMissing)
	}
	if out, err := exec.Command(envoyBin, "--version").CombinedOutput(); err != nil {
		t.Fatalf("ENVOY_BIN=%s does not run: %v\n%s", envoyBin, err, out)
	} else if !strings.Contains(string(out), "/1.36.") {
		t.Logf("warning: %s is not Envoy 1.36 (the SDK in go.mod is v1.36.2): %s", envoyBin, strings.TrimSpace(string(out)))
	}
	dir := t.TempDir()
	s := &stack{dir: dir, envoyAddr: proctest.FreeAddr(t), adminAddr: proctest.FreeAddr(t),
		accessLog: filepath.Join(dir, "access.log")}
	s.so = bins.Build(t, "llmesh-filter.so", "-buildmode=c-shared", "../../cmd/llmesh-filter")
	s.llmesh = bins.Build(t, "llmesh", "../../cmd/llmesh")
	sim := proctest.StartSim(t, s.llmesh, "sim", "--time-scale", "10")
	s.simHTTP, s.simGRPC = strings.TrimPrefix(sim.URL, "http://"), sim.GRPC
	proctest.WaitHTTP(t, sim.URL+"/v1/models", sim)
	return s
}

// rewrite adapts a bootstrap's addresses and paths to this stack and
// writes it into the stack's directory.
func (s *stack) rewrite(t *testing.T, bootstrap string, extra map[string]string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", bootstrap))
	if err != nil {
		t.Fatal(err)
	}
	y := string(data)
	repl := map[string]string{
		"port_value: 10000":           "port_value: " + proctest.Port(t, s.envoyAddr),
		"port_value: 9901":            "port_value: " + proctest.Port(t, s.adminAddr),
		"port_value: 8000":            "port_value: " + proctest.Port(t, s.simHTTP),
		"port_value: 9000":            "port_value: " + proctest.Port(t, s.simGRPC),
		`"127.0.0.1:8000"`:            strconv.Quote(s.simHTTP),
		`"127.0.0.1:9000"`:            strconv.Quote(s.simGRPC),
		"/etc/envoy/llmesh-filter.so": s.so,
		"path: /dev/stdout":           "path: " + s.accessLog,
	}
	for k, v := range extra {
		repl[k] = v
	}
	for k, v := range repl {
		y = strings.ReplaceAll(y, k, v)
	}
	cfg := filepath.Join(s.dir, bootstrap)
	if err := os.WriteFile(cfg, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// startEnvoy starts Envoy on a rewritten bootstrap.
func (s *stack) startEnvoy(t *testing.T, bootstrap string, extra map[string]string) {
	t.Helper()
	cfg := s.rewrite(t, bootstrap, extra)
	// GOMAXPROCS must be at least --concurrency; cgocheck=0 as Envoy's
	// golang extension docs advise.
	cmd := exec.Command(os.Getenv("ENVOY_BIN"), "-c", cfg, "--concurrency", "2", "--disable-hot-restart", "--log-level", "warn")
	cmd.Env = append(os.Environ(), "GOMAXPROCS=2", "GODEBUG=cgocheck=0")
	s.envoy = proctest.StartCmd(t, "envoy", cmd)
	proctest.WaitHTTP(t, "http://"+s.adminAddr+"/ready", s.envoy)
}

// TestRewrittenBootstrapsValid checks, without Envoy, what the real-Envoy
// tests feed it: the rewritten bootstraps are still valid.
func TestRewrittenBootstrapsValid(t *testing.T) {
	dir := t.TempDir()
	s := &stack{dir: dir, so: filepath.Join(dir, "llmesh-filter.so"), simHTTP: "127.0.0.1:18080", simGRPC: "127.0.0.1:18090",
		envoyAddr: "127.0.0.1:18100", adminAddr: "127.0.0.1:18110", accessLog: filepath.Join(dir, "access.log")}
	static := loadBootstrap(t, s.rewrite(t, "envoy-static.yaml", nil))
	if got := static.GetStaticResources().GetListeners()[0].GetAddress().GetSocketAddress().GetPortValue(); got != 18100 {
		t.Errorf("listener port %d after rewrite", got)
	}
	if got := findGolang(t, static).GetLibraryPath(); got != s.so {
		t.Errorf("library_path %q after rewrite", got)
	}
	if got := static.GetStaticResources().GetClusters()[0].GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].
		GetEndpoint().GetAddress().GetSocketAddress().GetPortValue(); got != 18080 {
		t.Errorf("sim cluster port %d after rewrite", got)
	}
	ads := loadBootstrap(t, s.rewrite(t, "envoy.yaml", map[string]string{"port_value: 18000": "port_value: 18120"}))
	if got := ads.GetStaticResources().GetClusters()[0].GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].
		GetEndpoint().GetAddress().GetSocketAddress().GetPortValue(); got != 18120 {
		t.Errorf("control cluster port %d after rewrite", got)
	}
}

// stat returns the value of the Envoy stat whose name ends in suffix.
func (s *stack) stat(t *testing.T, suffix string) int {
	t.Helper()
	resp, err := http.Get("http://" + s.adminAddr + "/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), ": ")
		if ok && strings.HasSuffix(name, suffix) {
			n, _ := strconv.Atoi(val)
			return n
		}
	}
	t.Fatalf("no stat ending in %q", suffix)
	return 0
}

var (
	doneRE = regexp.MustCompile(`data: \[DONE\]\s*$`)
	// controlXDSRE is the line `llmesh control` prints once it serves xDS.
	controlXDSRE = regexp.MustCompile(`llmesh control: xds on (\S+) `)
)

// sse sends one streaming completion through Envoy.
func (s *stack) sse(t *testing.T, header ...string) {
	t.Helper()
	body := `{"prompt":"hello","max_tokens":8,"stream":true}`
	req, _ := http.NewRequest(http.MethodPost, "http://"+s.envoyAddr+"/v1/completions", strings.NewReader(body))
	req.Header.Set("content-type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !doneRE.Match(b) {
		t.Fatalf("SSE through Envoy: %d\n%s", resp.StatusCode, b)
	}
}

// grpcCall sends one llm.v1 stream through Envoy with the prompt in
// metadata (relocated by the filter) and returns the tokens received.
func (s *stack) grpcCall(t *testing.T) int {
	t.Helper()
	conn, err := grpc.NewClient(s.envoyAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "x-llmesh-prompt", strings.Repeat("relocate me ", 400))
	st, err := llmv1.NewGenerationClient(conn).Generate(ctx, &llmv1.GenerateRequest{MaxTokens: 9, Sampling: &llmv1.SamplingParams{IgnoreEos: true}})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		m, err := st.Recv()
		if err == io.EOF {
			return n
		}
		if err != nil {
			t.Fatalf("gRPC through Envoy: %v", err)
		}
		n += len(m.GetTokenIds())
	}
}

// TestEnvoyStatic: Envoy with envoy-static.yaml and the .so in front of the
// sim; SSE and gRPC (with relocation) stream through, the filter's stats
// count them and the access log carries the dynamic metadata.
func TestEnvoyStatic(t *testing.T) {
	s := newStack(t)
	s.startEnvoy(t, "envoy-static.yaml", nil)
	s.sse(t, "x-tenant-id", "gold")
	if n := s.grpcCall(t); n != 9 {
		t.Errorf("gRPC tokens = %d, want 9", n)
	}
	if n := s.stat(t, "llmesh.requests"); n != 2 {
		t.Errorf("llmesh.requests = %d, want 2", n)
	}
	if n := s.stat(t, "llmesh.relocated"); n != 1 {
		t.Errorf("llmesh.relocated = %d, want 1", n)
	}
	if n := s.stat(t, "llmesh.inflight"); n != 0 {
		t.Errorf("llmesh.inflight = %d after all streams ended", n)
	}
	// Access log lines are written when streams end; poll for both.
	var lines []map[string]interface{}
	proctest.Until(t, "both streams in the access log", func() (bool, string) {
		lines = lines[:0]
		data, err := os.ReadFile(s.accessLog)
		for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			var m map[string]interface{}
			if json.Unmarshal([]byte(l), &m) == nil {
				lines = append(lines, m)
			}
		}
		return len(lines) >= 2, fmt.Sprintf("%d JSON lines (%v)", len(lines), err)
	}, s.envoy)
	classes := map[string]bool{}
	for _, l := range lines {
		classes[fmt.Sprint(l["class"])] = true
		if v, ok := l["ttft_ms"].(float64); !ok || v <= 0 {
			t.Errorf("access log line without ttft_ms: %v", l)
		}
	}
	if !classes["interactive"] || !classes["batch"] {
		t.Errorf("classes in the access log: %v, want interactive (tenant gold) and batch", classes)
	}
}

// TestEnvoyADS: Envoy with envoy.yaml gets its listener, routes and
// clusters (and the filter config) from llmesh control.
func TestEnvoyADS(t *testing.T) {
	s := newStack(t)
	mesh := fmt.Sprintf(`listeners:
  - name: main
    address: %s
    routes:
      - {match: {path_prefix: /llm.v1.Generation/}, pool: sim-grpc}
      - {match: {path_prefix: /}, pool: sim}
pools:
  - {name: sim, protocol: openai, endpoints: [%q], capacity: {max_inflight: 4}, scheduler: {policy: preemptive}}
  - {name: sim-grpc, protocol: grpc, endpoints: [%q], capacity: {max_inflight: 4}, scheduler: {policy: preemptive}}
classes:
  - {name: interactive, priority: 0, slo: {ttft: 500ms}}
  - {name: batch, priority: 10, preemptible: true}
default_class: batch
classification: {tenants: {gold: interactive}}
relocation:
  grpc: [{metadata: x-llmesh-prompt, field: 2}]
`, s.envoyAddr, s.simHTTP, s.simGRPC)
	meshPath := proctest.WriteTemp(t, "mesh.yaml", mesh)
	ctl := proctest.Start(t, "control", s.llmesh, "control", "--config", meshPath, "--xds", "127.0.0.1:0", "--admin", "off", "--library-path", s.so)
	xds := ctl.WaitOutput(t, controlXDSRE)[1]
	s.startEnvoy(t, "envoy.yaml", map[string]string{"port_value: 18000": "port_value: " + proctest.Port(t, xds)})
	// The listener arrives over ADS after /ready: poll until it serves.
	proctest.Until(t, "the listener from llmesh control to serve", func() (bool, string) {
		resp, err := http.Get("http://" + s.envoyAddr + "/v1/models")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return true, ""
	}, s.envoy, ctl)
	s.sse(t)
	if n := s.grpcCall(t); n != 9 {
		t.Errorf("gRPC tokens = %d, want 9", n)
	}
	if n := s.stat(t, "llmesh.requests"); n < 2 {
		t.Errorf("llmesh.requests = %d, want ≥ 2", n)
	}
	if n := s.stat(t, "llmesh.relocated"); n != 1 {
		t.Errorf("llmesh.relocated = %d, want 1", n)
	}
}
