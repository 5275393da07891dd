package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/llmesh/llmesh/testkit/proctest"
	"github.com/llmesh/llmesh/testkit/promtext"
)

// fleetMesh is a pool of the given sims, one slot each (the pool holds as
// many), preemptive, with an interactive class for requests carrying
// x-class: interactive and a preemptible batch class for the rest; with a
// service address, its scheduler is that service, reached over transport
// (empty: the default).
func fleetMesh(sims []*proctest.Sim, service, transport string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `listeners:
  - name: main
    address: 127.0.0.1:0
    routes:
      - {name: urgent, match: {path_prefix: /v1/, headers: {x-class: interactive}}, pool: engine, class: interactive}
      - {name: batch, match: {path_prefix: /v1/}, pool: engine, class: batch}
pools:
  - name: engine
    protocol: openai
    capacity: {max_inflight: %d}
    scheduler:
      policy: preemptive
      preemption: {min_lower_inflight: 1, max_per_request: 3}
    endpoints:
`, len(sims))
	for _, s := range sims {
		fmt.Fprintf(&b, "      - {address: %s, max_inflight: 1}\n", strings.TrimPrefix(s.URL, "http://"))
	}
	b.WriteString(`classes:
  - {name: interactive, priority: 0, slo: {ttft: 100ms}, queue: {max_length: 100, max_wait: 2m}}
  - {name: batch, priority: 10, preemptible: true, slo: {ttft: 1m, tpot: 500ms}, queue: {max_length: 100, max_wait: 2m}}
default_class: batch
admin: {address: 127.0.0.1:0}
`)
	if service != "" {
		tr := ""
		if transport != "" {
			tr = ", transport: " + transport
		}
		fmt.Fprintf(&b, "scheduler_service: {address: %s, failure_mode: fail_closed, timeout: 30s%s}\n", service, tr)
	}
	return b.String()
}

// TestTwoGatewaysShareOneSchedulerOverThreeSims runs two `llmesh gateway`
// processes on one `llmesh scheduler serve` in front of three `llmesh sim`
// processes of one slot each (one gateway's session over gRPC, the other's
// framed). Three long batch streams (two through one
// gateway, one through the other) fill the three sims; then an interactive
// request through the second gateway preempts one of them. By the sims' own
// metrics: no sim ever held more than its one slot (llmesh_sim:requests_peak;
// each gateway alone would have sent up to three requests to a sim without
// the shared service's endpoint limits), exactly one stream was aborted,
// and the interactive request completed on the sim that aborted it
// (vllm:request_success_total, while the batch streams still run).
func TestTwoGatewaysShareOneSchedulerOverThreeSims(t *testing.T) {
	sims := []*proctest.Sim{startSim(t, "sim-a"), startSim(t, "sim-b"), startSim(t, "sim-c")}
	sched := start(t, "scheduler", "scheduler", "serve", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0",
		"--config", proctest.WriteTemp(t, "mesh.yaml", fleetMesh(sims, "", "")))
	schedAddr := sched.WaitOutput(t, schedulerRE)[1]
	schedAdmin := "http://" + sched.WaitOutput(t, schedulerAdminRE)[1]
	proctest.WaitHTTP(t, schedAdmin+"/healthz", sched)
	// The first gateway's session is a gRPC stream, the second's framed
	// (plain TCP): one service, one address, both transports.
	path := proctest.WriteTemp(t, "mesh.yaml", fleetMesh(sims, schedAddr, "grpc"))
	framedPath := proctest.WriteTemp(t, "mesh-framed.yaml", fleetMesh(sims, schedAddr, "framed"))
	gws := []*gatewayProc{startGateway(t, "gateway-a", "--config", path), startGateway(t, "gateway-b", "--config", framedPath)}

	metric := func(s *proctest.Sim, name string) float64 {
		v, _ := promtext.Sum(proctest.MustGet(t, s.URL+"/metrics"), name)
		return v
	}
	schedMetric := func(name, label string) float64 {
		v, _ := promtext.Sum(filterLabel(proctest.MustGet(t, schedAdmin+"/metrics"), label), name)
		return v
	}

	// The batch streams run far longer than the test: they end when it
	// cancels them.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	batchDone := make(chan error, len(sims))
	for i := range sims {
		gw := gws[0]
		if i == len(sims)-1 {
			gw = gws[1]
		}
		go func() {
			body := `{"model":"` + sims[0].Model + `","prompt":"a long batch job","max_tokens":20000,"ignore_eos":true,"stream":true}`
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, gw.URL()+"/v1/completions", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			res, err := http.DefaultClient.Do(req)
			if err == nil {
				_, err = io.Copy(io.Discard, res.Body)
				res.Body.Close()
			}
			batchDone <- err
		}()
	}
	over := -1 // a sim past its limit ends the wait at once
	proctest.WaitFor(t, "a batch stream generating on every sim", func() bool {
		for i, s := range sims {
			if metric(s, "llmesh_sim:requests_peak") > 1 {
				over = i
				return true
			}
		}
		for _, s := range sims {
			if metric(s, "vllm:generation_tokens_total") < 5 {
				return false
			}
		}
		return schedMetric("llmesh_scheduler_inflight", `pool="engine"`) == float64(len(sims))
	}, sched)
	if over >= 0 {
		t.Fatalf("sim %d held %v batch streams at once, its endpoint limit is 1", over, metric(sims[over], "llmesh_sim:requests_peak"))
	}

	before := make([]float64, len(sims))
	for i, s := range sims {
		before[i] = metric(s, "vllm:request_success_total")
	}
	body := `{"model":"` + sims[0].Model + `","prompt":"urgent","max_tokens":4,"stream":true}`
	req, _ := http.NewRequest(http.MethodPost, gws[1].URL()+"/v1/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Class", "interactive")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil || res.StatusCode != http.StatusOK || !strings.Contains(string(out), "[DONE]") {
		t.Fatalf("interactive request: status %d, %v, body %q", res.StatusCode, err, out)
	}

	// The sim counts the interactive request's success a moment after
	// its last byte; the batch streams are still running.
	var served []int
	proctest.WaitFor(t, "the sim that served the interactive request to count it", func() bool {
		served = served[:0]
		for i, s := range sims {
			if metric(s, "vllm:request_success_total") > before[i] {
				served = append(served, i)
			}
		}
		return len(served) > 0
	}, sched)
	var victim []int
	for i, s := range sims {
		if a := metric(s, "llmesh_sim:requests_aborted_total"); a > 0 {
			victim = append(victim, i)
			if a != 1 {
				t.Errorf("sim %d aborted %v streams, want at most 1", i, a)
			}
		}
	}
	t.Logf("victim aborted on sim %v, interactive request served by sim %v", victim, served)
	if len(victim) != 1 || len(served) != 1 || victim[0] != served[0] {
		t.Errorf("victim aborted on sims %v, interactive request served by sims %v: want one victim, on the sim that served it", victim, served)
	}
	if p := schedMetric("llmesh_scheduler_events_total", `event="preempted"`); p != 1 {
		t.Errorf("the service preempted %v times, want 1", p)
	}
	if n := schedMetric("llmesh_scheduler_service_sessions", ""); n != 2 {
		t.Errorf("%v sessions open on the service, want one per gateway", n)
	}
	for i, s := range sims {
		peak, ok := promtext.Sum(proctest.MustGet(t, s.URL+"/metrics"), "llmesh_sim:requests_peak")
		if !ok {
			t.Fatalf("sim %d exports no llmesh_sim:requests_peak", i)
		}
		if peak > 1 {
			t.Errorf("sim %d held %v requests at once, its endpoint limit is 1", i, peak)
		}
	}
	cancel()
	for range sims {
		<-batchDone
	}
}

// TestKilledProxyFreesItsLeases: a `llmesh scheduler bench` process (two
// client proxies, one Session stream each) holds six leases on `llmesh
// scheduler serve` and is killed with SIGKILL, so nothing is released
// cleanly: the service sees both streams break and frees all six leases.
func TestKilledProxyFreesItsLeases(t *testing.T) {
	path := filepath.Join("..", "examples", "mesh-fleet.yaml")
	sched := start(t, "scheduler", "scheduler", "serve", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--config", path)
	schedAddr := sched.WaitOutput(t, schedulerRE)[1]
	schedAdmin := "http://" + sched.WaitOutput(t, schedulerAdminRE)[1]
	proctest.WaitHTTP(t, schedAdmin+"/healthz", sched)
	gauge := func(name string) float64 {
		v, _ := promtext.Sum(filterLabel(proctest.MustGet(t, schedAdmin+"/metrics"), name), name)
		return v
	}
	cmd := exec.Command(llmesh(t), "scheduler", "bench", "--target", schedAddr, "--config", path, "--proxies", "2",
		"--inflight", "6", "--hold", "10m", "--duration", "10m", "--warmup", "0s")
	proxy := proctest.StartCmd(t, "bench", cmd)
	proctest.WaitFor(t, "six leases held over two sessions", func() bool {
		return gauge("llmesh_scheduler_inflight") == 6 && gauge("llmesh_scheduler_service_sessions") == 2
	}, sched, proxy)
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-proxy.Done()
	proctest.WaitFor(t, "the killed proxy's leases released", func() bool {
		return gauge("llmesh_scheduler_inflight") == 0 && gauge("llmesh_scheduler_service_sessions") == 0
	}, sched)
	events := filterLabel(proctest.MustGet(t, schedAdmin+"/metrics"), `event="cancelled"`)
	if c, _ := promtext.Sum(events, "llmesh_scheduler_events_total"); c != 6 {
		t.Errorf("%v leases released as cancelled, want the six the proxy held", c)
	}
}
