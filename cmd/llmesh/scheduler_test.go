package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/client"
)

func TestSchedulerFlags(t *testing.T) {
	var out, errOut bytes.Buffer
	err := Main(context.Background(), []string{"scheduler", "serve", "--listen", "nonsense", "extra"}, &out, &errOut)
	var ec *exitCode
	if !errors.As(err, &ec) || ec.code != 2 {
		t.Fatalf("err = %v, want exit code 2", err)
	}
	for _, want := range []string{"--config: required", `--listen: "nonsense"`, "unexpected arguments"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if err := Main(context.Background(), []string{"scheduler"}, &out, &errOut); err == nil {
		t.Error("scheduler without serve succeeded")
	}
}

// lockedBuffer is an io.Writer the command writes while the test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestSchedulerServe(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mesh.yaml")
	mesh := "pools:\n  - {name: gpu, protocol: openai, endpoints: [127.0.0.1:1], capacity: {max_inflight: 2}, scheduler: {policy: preemptive}}\n" +
		"classes:\n  - {name: default, priority: 0}\n"
	if err := os.WriteFile(path, []byte(mesh), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut lockedBuffer
	done := make(chan error, 1)
	go func() {
		done <- Main(ctx, []string{"scheduler", "serve", "--listen", "127.0.0.1:0", "--config", path}, &out, &errOut)
	}()
	const prefix = "scheduler service listening on "
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), prefix) {
		select {
		case err := <-done:
			t.Fatalf("serve ended: %v\n%s", err, errOut.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("not listening; stderr:\n%s", errOut.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	addr := strings.TrimSpace(strings.TrimPrefix(out.String(), prefix))
	if i := strings.Index(addr, "\n"); i >= 0 {
		addr = addr[:i]
	}
	c, err := client.New(addr, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := c.Admit(ctx, scheduler.Request{Pool: "gpu"})
	if err != nil {
		t.Fatal(err)
	}
	l.Release(scheduler.Done)
	c.Close()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("serve: %v", err)
	}
	if !strings.Contains(errOut.String(), "pool gpu: policy preemptive, max_inflight 2") {
		t.Errorf("stderr:\n%s", errOut.String())
	}
}
