package faults

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/llmesh/llmesh/gateway"
	"github.com/llmesh/llmesh/sim/simtest"
)

// syncBuffer is a log destination read while the gateway writes to it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

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

// replace swaps the file's content by rename, as editors and config-map
// updates do.
func replace(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// TestConfigReplacedWithInvalid runs `llmesh gateway --config` in process,
// replaces its mesh file with an invalid one and checks that the running
// config stays (requests keep flowing), that the error is reported with the
// offending field's path, and that a later valid file is still applied.
func TestConfigReplacedWithInvalid(t *testing.T) {
	s := simtest.Start(t)
	simAddr := strings.TrimPrefix(s.HTTPURL, "http://")
	path := filepath.Join(t.TempDir(), "mesh.yaml")
	if err := os.WriteFile(path, []byte(meshYAML(simAddr)), 0o644); err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	ready := make(chan string, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- gateway.Run(ctx, gateway.RunConfig{
			ConfigPath: path,
			Listen:     "127.0.0.1:0",
			Logger:     slog.New(slog.NewTextHandler(logs, nil)),
			Ready:      func(data, _ net.Addr) { ready <- "http://" + data.String() },
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("gateway.Run: %v", err)
		}
		if t.Failed() {
			t.Logf("gateway log:\n%s", logs.String())
		}
	})
	var gw string
	select {
	case gw = <-ready:
	case err := <-done:
		t.Fatalf("gateway.Run ended early: %v", err)
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
	replace(t, path, invalid)
	eventually(t, "invalid config reported", func() (bool, string) {
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
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close()
	replace(t, path, meshYAML(deadAddr))
	eventually(t, "valid config applied after the invalid one", func() (bool, string) {
		got := status()
		return got == http.StatusBadGateway, fmt.Sprintf("status %d", got)
	})
}
