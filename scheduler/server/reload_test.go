package server_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/client"
	"github.com/llmesh/llmesh/scheduler/server"
	"github.com/llmesh/llmesh/testkit/proctest"
)

// poll waits until cond holds.
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func reloadMesh(maxInflight, policy string) string {
	return `
pools:
  - name: gpu
    protocol: openai
    endpoints: [127.0.0.1:1]
    capacity: {max_inflight: ` + maxInflight + `}
    scheduler: {policy: ` + policy + `}
classes:
  - {name: default, priority: 0, queue: {max_length: 8}}
`
}

// writeFile replaces path atomically, the way editors and config maps do.
func writeFile(t *testing.T, path, data string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func metrics(t *testing.T, admin string) string {
	t.Helper()
	res, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return string(b)
}

// The service reloads its mesh file: a capacity change reaches the open
// admission streams (the waiting one is admitted, the admitted one stays),
// and an invalid file is logged with its field and changes nothing.
func TestRunReloadsConfigFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mesh.yaml")
	writeFile(t, path, reloadMesh("1", "fifo"))
	var log proctest.Buffer
	admin, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- server.Run(ctx, l, server.Options{ConfigPath: path, Log: &log, Admin: admin,
			Ready: func(a net.Addr) { ready <- a.String() }})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	var addr string
	select {
	case addr = <-ready:
	case err := <-done:
		t.Fatalf("Run ended early: %v", err)
	}
	c, err := client.New(addr, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	actx, acancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer acancel()
	held, err := c.Admit(actx, scheduler.Request{Class: "default"})
	if err != nil {
		t.Fatal(err)
	}
	waited := make(chan admitResult, 1)
	admitAsync(actx, c, "w", scheduler.Request{Class: "default"}, waited)
	a := admin.Addr().String()
	poll(t, "the second request to queue", func() bool {
		return strings.Contains(metrics(t, a), `llmesh_scheduler_queued{class="default",pool="gpu"} 1`)
	})

	writeFile(t, path, reloadMesh("2", "fifo"))
	r := next(t, waited)
	if r.err != nil {
		t.Fatalf("waiting stream after the capacity reload: %v", r.err)
	}
	poll(t, "the reload log lines", func() bool {
		l := log.String()
		return strings.Contains(l, "config reloaded; 1 pool(s) rebuilt") && strings.Contains(l, "pool gpu: policy fifo, max_inflight 2")
	})
	body := metrics(t, a)
	for _, want := range []string{`llmesh_scheduler_inflight{pool="gpu"} 2`, `llmesh_scheduler_limit{pool="gpu"} 1`} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics after reload lacks %q", want)
		}
	}
	// The stream admitted before the reload is still open and releases
	// normally; the new scheduler's full capacity is then free.
	held.Release(scheduler.Done)
	poll(t, "the old lease's release", func() bool {
		return strings.Contains(metrics(t, a), `llmesh_scheduler_limit{pool="gpu"} 2`)
	})

	writeFile(t, path, reloadMesh("2", "lottery"))
	poll(t, "the rejection log line", func() bool { return strings.Contains(log.String(), "config change rejected") })
	if !strings.Contains(log.String(), "pools[0].scheduler.policy") {
		t.Errorf("rejection does not name the field:\n%s", log.String())
	}
	second, err := c.Admit(actx, scheduler.Request{Class: "default"})
	if err != nil {
		t.Fatalf("admit after a rejected change: %v", err)
	}
	second.Release(scheduler.Done)
	r.l.Release(scheduler.Done)

	// An experiment added by a reload brings its arm pools.
	arm := config.ArmPoolName("gpu", "edf")
	if _, err := c.Admit(actx, scheduler.Request{Pool: arm}); !errors.Is(err, scheduler.ErrRejected) {
		t.Fatalf("arm pool before the experiment exists: %v", err)
	}
	writeFile(t, path, reloadMesh("2", "fifo")+"experiments:\n  - {name: ab, pool: gpu, arms: [{name: edf, scheduler: {policy: edf}}]}\n")
	poll(t, "the arm pool", func() bool {
		return strings.Contains(metrics(t, a), `llmesh_scheduler_limit{pool="`+arm+`"} 2`)
	})
	l3, err := c.Admit(actx, scheduler.Request{Pool: arm})
	if err != nil {
		t.Fatalf("admit to the new arm pool: %v", err)
	}
	l3.Release(scheduler.Done)
}
