package faults

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/llmesh/llmesh/cmd/llmesh/gatewayproc"
	"github.com/llmesh/llmesh/sim/simtest"
	"github.com/llmesh/llmesh/testkit/proctest"
)

// meshYAML is a one-listener mesh whose only route sends /v1/ to one pool.
func meshYAML(simHostPort string) string {
	return `listeners:
  - name: main
    address: 127.0.0.1:0
    routes:
      - name: api
        match: {path_prefix: /v1/}
        pool: sim
pools:
  - name: sim
    protocol: openai
    endpoints: [` + simHostPort + `]
    capacity: {max_inflight: 8}
    scheduler: {policy: fifo}
classes:
  - name: standard
    priority: 0
default_class: standard
`
}

// TestConfigReplacedWithInvalid runs `llmesh gateway --config` in process,
// replaces its mesh file with an invalid one and checks that the running
// config stays (requests keep flowing), that the error is reported with the
// offending field's path, and that a later valid file is still applied.
func TestConfigReplacedWithInvalid(t *testing.T) {
	s := simtest.Start(t)
	simAddr := strings.TrimPrefix(s.HTTPURL, "http://")
	path := proctest.WriteTemp(t, "mesh.yaml", meshYAML(simAddr))
	logs := &proctest.Buffer{}
	proctest.ShowOnFailure(t, "gateway log", logs)
	ready := make(chan string, 1)
	run := proctest.Go(t, "gatewayproc.Run", func(ctx context.Context) error {
		return gatewayproc.Run(ctx, gatewayproc.Config{
			ConfigPath: path,
			Listen:     "127.0.0.1:0",
			Logger:     slog.New(slog.NewTextHandler(logs, nil)),
			Ready:      func(data, _ net.Addr) { ready <- "http://" + data.String() },
		})
	})
	var gw string
	select {
	case gw = <-ready:
	case <-run.Done():
		t.Fatalf("gatewayproc.Run ended early: %v", run.Err())
	}

	status := func() int {
		res, err := send(context.Background(), gw, completion(s.Model, 4, "config"), nil)
		if err != nil {
			t.Fatalf("request: %v", err)
		}
		readAll(res.Body)
		res.Body.Close()
		return res.StatusCode
	}
	if got := status(); got != http.StatusOK {
		t.Fatalf("status %d with the first config", got)
	}

	invalid := strings.Replace(meshYAML(simAddr), "protocol: openai", "protocol: carrier-pigeon", 1)
	proctest.Replace(t, path, invalid)
	poll.Until(t, "invalid config reported", func() (bool, string) {
		l := logs.String()
		return strings.Contains(l, "keeping the last good config") && strings.Contains(l, "pools[0].protocol"), l
	})
	for i := 0; i < 5; i++ {
		if got := status(); got != http.StatusOK {
			t.Fatalf("request %d after the invalid file: status %d, want the old config's 200", i, got)
		}
	}

	// A valid change still applies: the pool now points at an address
	// where nothing listens, so requests fail with 502.
	proctest.Replace(t, path, meshYAML(proctest.FreeAddr(t)))
	poll.Until(t, "valid config applied after the invalid one", func() (bool, string) {
		got := status()
		return got == http.StatusBadGateway, fmt.Sprintf("status %d", got)
	})
}
