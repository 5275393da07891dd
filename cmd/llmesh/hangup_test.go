package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/llmesh/llmesh/sim/simtest"
	"github.com/llmesh/llmesh/testkit/proctest"
)

// startLLMesh runs `llmesh args…` as a process of its own (this test
// binary, started again as main: see TestMain), so that a signal reaches
// the real main and its real signal handling.
func startLLMesh(t *testing.T, args ...string) (*proctest.Proc, *exec.Cmd) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), docExecEnv+"=llmesh")
	return proctest.StartCmd(t, "llmesh "+args[0], cmd), cmd
}

func hangup(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatalf("SIGHUP: %v", err)
	}
}

// TestHangupGatewayReloadsAndKeepsStreams: SIGHUP makes `llmesh gateway`
// reload its config file (logged) instead of ending the process (Go's
// default): a stream in flight across the signal completes, and a change
// made to the file is applied by that reload.
func TestHangupGatewayReloadsAndKeepsStreams(t *testing.T) {
	sim := simtest.Start(t)
	mesh := `
listeners: [{name: main, address: "127.0.0.1:0", routes: [{pool: sim}]}]
pools: [{name: sim, protocol: openai, endpoints: ["` + strings.TrimPrefix(sim.HTTPURL, "http://") + `"], capacity: {max_inflight: 4}}]
`
	path := proctest.WriteTemp(t, "mesh.yaml", mesh)
	p, cmd := startLLMesh(t, "gateway", "--config", path)
	gw := "http://" + p.WaitOutput(t, regexp.MustCompile(`gateway listening on (127\.0\.0\.1:\d+)`))[1]

	// A stream the sim stalls after its first token (0.5 s at its speed).
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, gw+"/v1/completions",
		strings.NewReader(`{"model":"`+sim.Model+`","prompt":"hold on","max_tokens":4,"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("x-llmesh-sim-fault", "stall=5s")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("status %d", res.StatusCode)
	}
	br := bufio.NewReader(res.Body)
	first, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(first, "data: ") {
		t.Fatalf("first line %q: %v", first, err)
	}

	hangup(t, cmd)
	p.WaitOutput(t, regexp.MustCompile(`SIGHUP: config file unchanged`))
	// A change the reload applies: the file watcher would see it too, so
	// the signal's own reload is told apart by its log line.
	proctest.Replace(t, path, mesh+"default_class: batch\nclasses: [{name: batch, priority: 10}]\n")
	hangup(t, cmd)
	p.WaitOutput(t, regexp.MustCompile(`SIGHUP: config file (reloaded|unchanged)`))

	rest, err := io.ReadAll(br)
	if err != nil || !strings.Contains(string(rest), "data: [DONE]") {
		t.Fatalf("the stream in flight did not complete across SIGHUP: %v\n%s%s", err, first, rest)
	}
	// Still serving.
	after, err := http.Post(gw+"/v1/completions", "application/json",
		strings.NewReader(`{"model":"`+sim.Model+`","prompt":"again","max_tokens":2}`))
	if err != nil {
		t.Fatalf("after SIGHUP: %v", err)
	}
	after.Body.Close()
	if after.StatusCode != http.StatusOK {
		t.Fatalf("after SIGHUP: status %d", after.StatusCode)
	}
	if out := p.Output(); !strings.Contains(out, "config reloaded") {
		t.Errorf("the changed file was not reloaded:\n%s", out)
	}
}

// TestHangupOtherCommandsKeepServing: control, scheduler serve and sim
// log SIGHUP and keep serving.
func TestHangupOtherCommandsKeepServing(t *testing.T) {
	for _, tc := range []struct {
		name   string
		args   []string
		ready  *regexp.Regexp // its first submatch is the base URL of health, which must answer after the signal
		health string
	}{
		{"control", []string{"control", "--config", "../../examples/mesh.yaml", "--xds", "127.0.0.1:0", "--admin", "127.0.0.1:0"},
			regexp.MustCompile(`admin on (http://127\.0\.0\.1:\d+)`), "/healthz"},
		{"scheduler serve", []string{"scheduler", "serve", "--config", "../../examples/mesh.yaml", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"},
			regexp.MustCompile(`scheduler admin on (http://127\.0\.0\.1:\d+)`), "/healthz"},
		{"sim", []string{"sim", "--listen", "127.0.0.1:0"}, regexp.MustCompile(`http on (http://127\.0\.0\.1:\d+)`), "/health"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, cmd := startLLMesh(t, tc.args...)
			url := p.WaitOutput(t, tc.ready)[1]
			// scheduler serve prints its admin address before it serves.
			p.WaitOutput(t, regexp.MustCompile(`listening on|xds on|http on`))
			hangup(t, cmd)
			p.WaitOutput(t, regexp.MustCompile(`SIGHUP received; still serving`))
			proctest.WaitHTTP(t, url+tc.health, p)
		})
	}
}
