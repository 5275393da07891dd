package server_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/client"
	"github.com/llmesh/llmesh/scheduler/server"
	"github.com/llmesh/llmesh/testkit/proctest"
	"github.com/llmesh/llmesh/testkit/schedtest"
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

// startService serves src's mesh with o until the test ends; it returns
// the service and its address.
func startService(t *testing.T, src string, o server.Options) (*server.Service, string) {
	t.Helper()
	c, err := config.Load([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	ready := make(chan string, 1)
	o.Mesh, o.Ready = c, func(a net.Addr) { ready <- a.String() }
	svc, err := server.NewService(o)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Serve(ctx, l) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
		if err := svc.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	select {
	case addr := <-ready:
		return svc, addr
	case err := <-done:
		t.Fatalf("Serve ended early: %v", err)
	}
	return nil, ""
}

func mustLoad(t *testing.T, src string) *config.Config {
	t.Helper()
	c, err := config.Load([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Reload applies a mesh live: a capacity change reaches the open
// admission streams (the waiting one is admitted, the admitted one
// stays), an experiment added brings its arm pools, and both are logged.
func TestServiceReload(t *testing.T) {
	var log proctest.Buffer
	admin, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	svc, addr := startService(t, reloadMesh("1", "fifo"), server.Options{Log: &log, Registry: metricsOn(t, admin)})
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
	waited := make(chan schedtest.Admission, 1)
	schedtest.AdmitInto(actx, c, "w", scheduler.Request{Class: "default"}, waited)
	a := admin.Addr().String()
	poll(t, "the second request to queue", func() bool {
		return strings.Contains(metrics(t, a), `llmesh_scheduler_queued{class="default",pool="gpu"} 1`)
	})

	if err := svc.Reload(mustLoad(t, reloadMesh("2", "fifo"))); err != nil {
		t.Fatal(err)
	}
	r := schedtest.Next(t, waited)
	if r.Err != nil {
		t.Fatalf("waiting stream after the capacity reload: %v", r.Err)
	}
	if l := log.String(); !strings.Contains(l, "config reloaded; 1 pool(s) rebuilt") || !strings.Contains(l, "pool gpu: policy fifo, max_inflight 2") {
		t.Errorf("reload log lines missing:\n%s", l)
	}
	if got := svc.Mesh().Pool("gpu").MaxInflight; got != 2 {
		t.Errorf("Mesh after the reload: max_inflight %d, want 2", got)
	}
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
	r.Lease.Release(scheduler.Done)

	// An experiment added by a reload brings its arm pools.
	arm := config.ArmPoolName("gpu", "edf")
	if _, err := c.Admit(actx, scheduler.Request{Pool: arm}); !errors.Is(err, scheduler.ErrRejected) {
		t.Fatalf("arm pool before the experiment exists: %v", err)
	}
	if err := svc.Reload(mustLoad(t, reloadMesh("2", "fifo")+"experiments:\n  - {name: ab, pool: gpu, arms: [{name: edf, scheduler: {policy: edf}}]}\n")); err != nil {
		t.Fatal(err)
	}
	l3, err := c.Admit(actx, scheduler.Request{Pool: arm})
	if err != nil {
		t.Fatalf("admit to the new arm pool: %v", err)
	}
	l3.Release(scheduler.Done)
}
