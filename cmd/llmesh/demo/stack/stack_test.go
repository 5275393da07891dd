package stack

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/llmesh/llmesh/cmd/llmesh/gatewayproc"
)

// runGateway is what cmd/llmesh hands the stack: `llmesh gateway`'s
// process wiring.
func runGateway(ctx context.Context, gc GatewayConfig) error {
	return gatewayproc.Run(ctx, gatewayproc.Config{ConfigPath: gc.ConfigPath, Listen: gc.Listen, Admin: gc.Admin,
		Drain: gc.Drain, Logger: gc.Logger, Ready: func(data, _ net.Addr) { gc.Ready(data) }})
}

const mesh = `
listeners:
  - name: l
    address: 127.0.0.1:0
    routes: [{name: r, match: {path_prefix: /v1/}, pool: engine}]
pools:
  - {name: engine, protocol: openai, endpoints: [SIM], capacity: {max_inflight: 4}, scheduler: {policy: fifo}}
classes: [{name: c, priority: 0}]
default_class: c
`

// TestStartServeStop runs a completion through the gateway to the engine,
// then stops both and checks no goroutine is left; a mesh the gateway
// refuses makes Start fail with nothing left running.
func TestStartServeStop(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	dir := t.TempDir()
	st, err := Start(context.Background(), Config{
		Mesh:     func(simHTTP, _ string) ([]byte, error) { return []byte(strings.ReplaceAll(mesh, "SIM", simHTTP)), nil },
		MeshPath: filepath.Join(dir, "mesh.yaml"),
		Gateway:  runGateway,
	})
	if err != nil {
		t.Fatal(err)
	}
	res, err := http.Post("http://"+st.Addr+"/v1/completions", "application/json",
		strings.NewReader(`{"prompt":"hello there","max_tokens":3}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || !strings.Contains(string(body), `"completion_tokens":3`) {
		t.Fatalf("%d %s", res.StatusCode, body)
	}
	http.DefaultClient.CloseIdleConnections()
	st.Stop()
	if p := st.Sim.Pace(); p.Steps == 0 {
		t.Errorf("engine pace %+v: no steps", p)
	}

	want := errors.New("no mesh")
	_, err = Start(context.Background(), Config{
		Mesh:     func(string, string) ([]byte, error) { return nil, want },
		MeshPath: filepath.Join(dir, "bad.yaml"),
		Gateway:  runGateway,
	})
	if !errors.Is(err, want) {
		t.Fatalf("Start with a failing mesh: %v", err)
	}
	_, err = Start(context.Background(), Config{
		Mesh:     func(string, string) ([]byte, error) { return []byte("pools: 3"), nil },
		MeshPath: filepath.Join(dir, "bad.yaml"),
		Gateway:  runGateway,
	})
	if err == nil || !strings.Contains(err.Error(), "gateway") {
		t.Fatalf("Start with an invalid mesh: %v", err)
	}
	_, err = Start(context.Background(), Config{
		Mesh:     func(simHTTP, _ string) ([]byte, error) { return []byte(strings.ReplaceAll(mesh, "SIM", simHTTP)), nil },
		MeshPath: filepath.Join(dir, "mesh.yaml"),
	})
	if err == nil || !strings.Contains(err.Error(), "no Gateway") {
		t.Fatalf("Start without a Gateway: %v", err)
	}
}
