package gateway

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/policy"
	"github.com/llmesh/llmesh/sim/simtest"
	"github.com/llmesh/llmesh/testkit/wait"
)

// TestEndpointsPreemptOnUrgentSim: two sims, one slot each, both running
// a long batch stream. An interactive request preempts one of them; the
// sim that aborted its stream (its own counter) is the sim the interactive
// request then runs on.
func TestEndpointsPreemptOnUrgentSim(t *testing.T) {
	sims := [2]*simtest.Sim{simtest.Start(t), simtest.Start(t)}
	eps := []string{strings.TrimPrefix(sims[0].HTTPURL, "http://"), strings.TrimPrefix(sims[1].HTTPURL, "http://")}
	pre, err := policy.Lookup("preemptive")
	if err != nil {
		t.Fatal(err)
	}
	sched, err := scheduler.New(scheduler.Config{
		Pools: []scheduler.PoolConfig{{Name: "sim", MaxInflight: 4, Policy: pre,
			Preemption: scheduler.PreemptionConfig{MinLowerInflight: 1, MaxPerRequest: 3},
			Endpoints:  []scheduler.EndpointConfig{{Name: eps[0], MaxInflight: 1}, {Name: eps[1], MaxInflight: 1}}}},
		Classes: []scheduler.ClassConfig{
			{Name: "interactive", Priority: 0, TTFT: 50 * time.Millisecond},
			{Name: "batch", Priority: 10, TTFT: time.Minute, TPOT: 50 * time.Millisecond, Preemptible: true},
		},
		DefaultClass: "batch",
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sched.Close() })
	rec := &recorder{ch: make(chan Record, 16)}
	_, gw := startGateway(t, Config{
		Pools: []Pool{{Name: "sim", Upstream: sims[0].HTTPURL, Endpoints: eps}},
		Routes: []Route{
			{Headers: map[string]string{"x-class": "interactive"}, Pool: "sim", Class: "interactive"},
			{Pool: "sim", Class: "batch"},
		},
		DefaultClass: "batch",
	}, WithAdmitter(sched), WithRecorder(rec))

	batch := make(chan error, 2)
	for i := 0; i < 2; i++ {
		go func() {
			res := post(t, context.Background(), gw+"/v1/completions", completion(sims[0].Model, 300))
			defer res.Body.Close()
			_, err := io.ReadAll(res.Body)
			batch <- err
		}()
	}
	wait.Until(t, "the batch streams to start on both sims", func() bool {
		return sched.Stats()[0].InFlight >= 2 && simMetric(t, sims[0], "vllm:generation_tokens_total") >= 5 &&
			simMetric(t, sims[1], "vllm:generation_tokens_total") >= 5
	})
	req, _ := http.NewRequest(http.MethodPost, gw+"/v1/completions", strings.NewReader(completion(sims[0].Model, 4)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Class", "interactive")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	var urgent Record
	for urgent.Class != "interactive" {
		urgent = rec.next(t)
	}
	if !urgent.OK() {
		t.Fatalf("interactive request failed: %q", urgent.Error)
	}
	// A sim counts an abort when it sees its client go, which may come
	// after the interactive request has ended: wait for the count.
	aborted := map[string]float64{}
	wait.UntilNil(t, "a sim to count the aborted batch stream", func() error {
		total := 0.0
		for i, s := range sims {
			aborted[eps[i]] = simMetric(t, s, "llmesh_sim:requests_aborted_total")
			total += aborted[eps[i]]
		}
		if total < 1 {
			return fmt.Errorf("aborted streams by sim: %v", aborted)
		}
		return nil
	})
	if aborted[urgent.Endpoint] != 1 {
		t.Fatalf("interactive request ran on %s; aborted streams by sim: %v (want the victim on the same sim)", urgent.Endpoint, aborted)
	}
	for i := 0; i < 2; i++ {
		if err := <-batch; err != nil {
			t.Errorf("batch stream: %v", err)
		}
	}
	if s := sched.Stats()[0]; s.Preempted != 1 {
		t.Errorf("preempted %d times, want 1", s.Preempted)
	}
}
