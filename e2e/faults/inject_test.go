package faults

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/llmesh/llmesh/bench/harness"
	"github.com/llmesh/llmesh/bench/result"
	"github.com/llmesh/llmesh/bench/workload"
	"github.com/llmesh/llmesh/bench/workloads"
	"github.com/llmesh/llmesh/gateway"
	"github.com/llmesh/llmesh/sim/simtest"
)

// tally counts the gateway's records by how they ended.
type tally struct {
	mu                   sync.Mutex
	ok, upstreamErr, cut int
	other                []string
}

func (c *tally) Record(r gateway.Record) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case r.OK():
		c.ok++
	case r.HTTPStatus >= 400:
		c.upstreamErr++
	case errors.Is(r.Err, gateway.ErrUpstreamReset):
		c.cut++
	default:
		c.other = append(c.other, fmt.Sprintf("status %d err %v (%s)", r.HTTPStatus, r.Err, r.Error))
	}
}

// standardWorkload is the standard mixed-priority workload, shortened to
// seconds and without warm-up so every request is measured.
func standardWorkload(t testing.TB, d time.Duration, rate float64) *workload.Workload {
	t.Helper()
	data, err := workloads.FS.ReadFile(workloads.Standard)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := workload.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	spec.Duration = workload.Duration(d)
	spec.Warmup = workload.Warmup{}
	spec.Arrival.Rate = rate
	spec.Timeout = workload.Duration(time.Minute)
	spec.Default()
	if err := spec.Validate(); err != nil {
		t.Fatal(err)
	}
	w, err := workload.Compile(spec, workload.CompileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// TestInjectedErrorsCounted runs the standard workload through a scheduled
// gateway to a sim that fails 5% of requests (500, 503, or a connection cut
// after two chunks). The SLO report counts exactly the failures the gateway
// saw, as misses of their class; every other request completes; and the
// gateway, scheduler and engine are idle and serving afterwards.
func TestInjectedErrorsCounted(t *testing.T) {
	s := simtest.Start(t, simtest.WithSeed(7), simtest.WithFaults(0.05, "500", "503", "drop-after=2"))
	sched := newScheduler(t, "priority", 64)
	var c tally
	gw := startGateway(t, gateway.Config{Pools: pools(s.HTTPURL, "")}, gateway.WithAdmitter(sched), gateway.WithRecorder(&c))

	rep, recs, err := harness.Run(context.Background(), harness.Options{
		Workload: standardWorkload(t, 4*time.Second, 40),
		Target:   gw,
		Label:    "faults-5pct",
	})
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	poll.Until(t, "scheduler idle", func() (bool, string) { return idle(poolStats(t, sched.Stats(), "sim")) })
	engineIdle(t, s.HTTPURL)

	c.mu.Lock()
	ok, upstreamErr, cut, other := c.ok, c.upstreamErr, c.cut, c.other
	c.mu.Unlock()
	failed := upstreamErr + cut
	t.Logf("%d requests: %d completed, %d failed (%d error statuses, %d cut mid-stream); report completed %d failed %d; by status %v",
		len(recs), ok, failed, upstreamErr, cut, rep.Completed, rep.Failed, rep.Requests)
	if len(other) > 0 {
		t.Errorf("%d requests failed for reasons other than the injected faults: %q", len(other), other)
	}
	if rep.NumPrompts != len(recs) || rep.Completed+rep.Failed != rep.NumPrompts {
		t.Errorf("report: %d prompts, %d records, %d completed + %d failed: requests lost", rep.NumPrompts, len(recs), rep.Completed, rep.Failed)
	}
	if rep.Completed != ok || rep.Failed != failed {
		t.Errorf("report completed %d failed %d, gateway saw %d ok and %d failed", rep.Completed, rep.Failed, ok, failed)
	}
	if n := rep.NumPrompts; failed == 0 || failed > n/5 {
		t.Errorf("%d of %d requests failed at a 5%% fault rate", failed, n)
	}
	sumFailed := 0
	for name, cr := range rep.Classes {
		sumFailed += cr.Failed
		if cr.Requests > 0 && cr.SLOAttainment > float64(cr.Completed)/float64(cr.Requests)+1e-9 {
			t.Errorf("class %s: attainment %.3f above its completion share %d/%d: failures not counted as misses", name, cr.SLOAttainment, cr.Completed, cr.Requests)
		}
	}
	if sumFailed != rep.Failed {
		t.Errorf("classes' failures sum to %d, overall %d", sumFailed, rep.Failed)
	}
	if got := rep.Requests[result.Status("ok")]; got != rep.Completed {
		t.Errorf("status ok %d, completed %d", got, rep.Completed)
	}

	// Nothing else broke: a plain request still completes.
	res, err := send(context.Background(), gw, completion(s.Model, 4, "after the faults"), nil)
	if err != nil {
		t.Fatal(err)
	}
	ev := readAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || len(ev) == 0 || ev[len(ev)-1].data != "[DONE]" {
		t.Errorf("request after the run: status %d, %d events", res.StatusCode, len(ev))
	}
}
