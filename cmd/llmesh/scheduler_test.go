package main

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/llmesh/llmesh/internal/proctest"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/client"
)

func TestSchedulerFlags(t *testing.T) {
	wantUsage(t, mainErr("scheduler", "serve", "--listen", "nonsense", "extra"),
		"--config: required", `--listen: "nonsense"`, "unexpected arguments")
	// A group without its subcommand shows its help; an unknown one is a
	// usage error.
	if err := mainErr("scheduler"); err != nil {
		t.Errorf("scheduler: %v, want its help", err)
	}
	wantUsage(t, mainErr("scheduler", "run"), `unknown command "run"`)
}

var schedulerListeningRE = regexp.MustCompile(`scheduler service listening on (\S+)`)

func TestSchedulerServe(t *testing.T) {
	mesh := "pools:\n  - {name: gpu, protocol: openai, endpoints: [127.0.0.1:1], capacity: {max_inflight: 2}, scheduler: {policy: preemptive}}\n" +
		"classes:\n  - {name: default, priority: 0}\n"
	path := proctest.WriteTemp(t, "mesh.yaml", mesh)
	s := serve(t, "scheduler", "serve", "--listen", "127.0.0.1:0", "--config", path)
	addr := proctest.WaitMatch(t, &s.stdout, schedulerListeningRE, s)[1]
	c, err := client.New(addr, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := c.Admit(context.Background(), scheduler.Request{Pool: "gpu"})
	if err != nil {
		t.Fatal(err)
	}
	l.Release(scheduler.Done)
	c.Close()
	if err := s.Stop(); err != nil {
		t.Fatalf("serve: %v", err)
	}
	if !strings.Contains(s.stderr.String(), "pool gpu: policy preemptive, max_inflight 2") {
		t.Errorf("stderr:\n%s", s.stderr.String())
	}
}
