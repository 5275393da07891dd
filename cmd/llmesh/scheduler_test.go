package main

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/client"
	"github.com/llmesh/llmesh/scheduler/loadgen"
	"github.com/llmesh/llmesh/testkit/proctest"
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

var (
	schedulerListeningRE = regexp.MustCompile(`scheduler service listening on (\S+)`)
	schedulerAdminRE     = regexp.MustCompile(`scheduler admin on (http://\S+)`)
)

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

func TestSchedulerBenchFlags(t *testing.T) {
	wantUsage(t, mainErr("scheduler", "bench", "--target", "nonsense", "--protocol", "carrier-pigeon", "--proxies", "0", "--transport", "smoke",
		"--service-metrics", "127.0.0.1:9/metrics"),
		`--target: "nonsense"`, "--config: required", "--proxies: 0 must be at least 1", `--protocol: "carrier-pigeon"`, `--transport: "smoke"`,
		`--service-metrics: "127.0.0.1:9/metrics" must be an http:// or https:// URL`)
	mesh := proctest.WriteTemp(t, "mesh.yaml", "pools:\n  - {name: gpu, protocol: openai, endpoints: [127.0.0.1:1]}\n")
	wantUsage(t, mainErr("scheduler", "bench", "--target", "127.0.0.1:1", "--config", mesh, "--rate", "10", "--inflight", "4"),
		"rate and inflight: set one")
	wantUsage(t, mainErr("scheduler", "bench", "--target", "127.0.0.1:1", "--config", mesh, "--proxies", "8", "--inflight", "4"),
		"inflight: 4 is fewer than the 8 proxies")
}

// scheduler bench against scheduler serve, both protocols: the JSON
// report counts admissions and no errors, and the service saw the
// session streams.
func TestSchedulerBench(t *testing.T) {
	path := filepath.Join(repoRoot(t), "examples", "mesh-fleet.yaml")
	s := serve(t, "scheduler", "serve", "--listen", "127.0.0.1:0", "--config", path, "--admin", "127.0.0.1:0")
	addr := proctest.WaitMatch(t, &s.stdout, schedulerListeningRE, s)[1]
	metrics := proctest.WaitMatch(t, &s.stdout, schedulerAdminRE, s)[1]
	for _, protocol := range []string{"session", "stream", "framed"} {
		out := filepath.Join(t.TempDir(), "bench.json")
		var stdout strings.Builder
		args := []string{"scheduler", "bench", "--target", addr, "--config", path, "--proxies", "2",
			"--rate", "400", "--duration", "300ms", "--warmup", "0s", "--json", out,
			"--service-metrics", metrics}
		switch protocol {
		case "framed":
			args = append(args, "--transport", "framed")
		case "session":
			args = append(args, "--transport", "grpc")
		default:
			args = append(args, "--protocol", protocol)
		}
		err := Main(context.Background(), args, &stdout, io.Discard)
		if err != nil {
			t.Fatalf("%s: %v\n%s", protocol, err, stdout.String())
		}
		var rep loadgen.Report
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &rep); err != nil {
			t.Fatal(err)
		}
		if rep.Admissions == 0 || rep.Errors != 0 || rep.Mode != "open" || rep.Proxies != 2 {
			t.Errorf("%s: report %+v", protocol, rep)
		}
		// The service's CPU counter counts in 10 ms ticks: a short run may
		// read 0 s, but it reads.
		if rep.ServiceCPU == nil || rep.ServiceCPU.Error != "" || !strings.Contains(stdout.String(), "service CPU per admission: ") {
			t.Errorf("%s: service CPU %+v, stdout %q", protocol, rep.ServiceCPU, stdout.String())
		}
		wantWire := map[string]string{"session": "session, transport grpc, report delay 150µs", "framed": "session, transport framed, report delay 150µs",
			"stream": "a gRPC Admit stream per admission"}[protocol]
		if rep.Wire != wantWire || !strings.Contains(stdout.String(), "wire           "+wantWire) {
			t.Errorf("%s: wire %q, want %q; stdout %q", protocol, rep.Wire, wantWire, stdout.String())
		}
		if !strings.Contains(stdout.String(), "scheduler bench: open loop, 2 proxies, target 400/s") {
			t.Errorf("%s: stdout %q", protocol, stdout.String())
		}
	}
	if err := s.Stop(); err != nil {
		t.Fatalf("serve: %v", err)
	}
}
