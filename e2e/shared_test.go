package e2e

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/llmesh/llmesh/testkit/proctest"
	"github.com/llmesh/llmesh/testkit/promtext"
)

var (
	schedulerRE      = regexp.MustCompile(`scheduler service listening on (\S+)`)
	schedulerAdminRE = regexp.MustCompile(`scheduler admin on http://(\S+)/metrics`)
)

// TestSharedScheduler runs two gateways on one `llmesh scheduler serve` with
// a pool capacity of N and drives more than N concurrent streams through
// each. The engine's own timestamps (arrival → finish of every request, one
// clock for both gateways' traffic) must never overlap more than N deep, and
// must reach N (the limit, not the load, bounded them); the scheduler's and
// the engine's gauges, sampled during the run, agree; everything completes.
func TestSharedScheduler(t *testing.T) {
	const (
		capacity  = 3
		perGW     = 10 // requests per gateway
		clients   = 4  // concurrent streams per gateway: 2×4 > capacity
		maxTokens = 64
	)
	sim := startSim(t, "sim")
	m := newMesh(sim)
	m.MaxInflight = capacity
	sched := start(t, "scheduler", "scheduler", "serve", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0",
		"--config", writeMesh(t, m))
	schedAddr := sched.WaitOutput(t, schedulerRE)[1]
	schedAdmin := "http://" + sched.WaitOutput(t, schedulerAdminRE)[1]
	proctest.WaitHTTP(t, schedAdmin+"/healthz", sched)

	m.SchedulerService = schedAddr
	path := writeMesh(t, m)
	gws := []*gatewayProc{startGateway(t, "gateway-a", "--config", path), startGateway(t, "gateway-b", "--config", path)}

	// Sample both gauges while the benches run. A breach of the limit by
	// long streams would last a whole stream, far longer than a sample.
	ctx, stop := context.WithCancel(context.Background())
	var (
		sampler                        sync.WaitGroup
		peakSched, peakEngine, samples int
		sampleErr                      error
	)
	sampler.Add(1)
	go func() {
		defer sampler.Done()
		for ctx.Err() == nil {
			st, err := proctest.Get(schedAdmin + "/metrics")
			if err == nil {
				var eng string
				if eng, err = proctest.Get(sim.URL + "/metrics"); err == nil {
					s, _ := promtext.Sum(filterLabel(st, `pool="engine"`), "llmesh_scheduler_inflight")
					e, _ := promtext.Sum(eng, "vllm:num_requests_running")
					peakSched, peakEngine = max(peakSched, int(s)), max(peakEngine, int(e))
					samples++
				}
			}
			if err != nil && sampleErr == nil {
				sampleErr = err
			}
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()

	runs := make([]*benchRun, len(gws))
	errs := make([]error, len(gws))
	dirs := []string{t.TempDir(), t.TempDir()}
	bin := llmesh(t)
	var wg sync.WaitGroup
	for i, gw := range gws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runs[i], errs[i] = tryBench(bin, dirs[i], gw.URL(), "--model", sim.Model,
				"--requests", strconv.Itoa(perGW), "--concurrency", strconv.Itoa(clients),
				"--prompt-tokens", "64", "--max-tokens", strconv.Itoa(maxTokens))
		}()
	}
	wg.Wait()
	stop()
	sampler.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("bench through %s: %v", gws[i].Name(), err)
		}
	}

	var starts, ends []int64
	for i, b := range runs {
		t.Run(gws[i].Name(), func(t *testing.T) { b.checkAllOK(t, perGW, maxTokens) })
		for _, r := range b.Records {
			if r.Engine != nil {
				starts, ends = append(starts, r.Engine.ArrivalNS), append(ends, r.Engine.FinishNS)
			}
		}
	}
	if peak := maxOverlap(starts, ends); peak != capacity {
		t.Errorf("engine ground truth: at most %d requests ran at once, want exactly the pool capacity %d", peak, capacity)
	}
	if sampleErr != nil {
		t.Errorf("sampling the gauges: %v", sampleErr)
	}
	if peakSched > capacity || peakEngine > capacity || samples == 0 {
		t.Errorf("sampled peaks (%d samples): llmesh_scheduler_inflight %d, vllm:num_requests_running %d; want ≤ %d",
			samples, peakSched, peakEngine, capacity)
	}
	t.Logf("%d samples: peak scheduler in-flight %d, peak engine running %d; engine-timestamp peak %d",
		samples, peakSched, peakEngine, maxOverlap(starts, ends))

	// The service admitted and released every request of both gateways.
	// A gateway releases its lease when the response has ended, which may
	// reach the service a moment after the client read the last byte.
	events := func() (map[string]int, float64) {
		st := filterLabel(proctest.MustGet(t, schedAdmin+"/metrics"), `pool="engine"`)
		got := map[string]int{}
		for _, event := range []string{"admitted", "done", "failed", "rejected", "queue_full", "cancelled"} {
			v, _ := promtext.Sum(filterLabel(st, fmt.Sprintf("event=%q", event)), "llmesh_scheduler_events_total")
			got[event] = int(v)
		}
		inflight, _ := promtext.Sum(st, "llmesh_scheduler_inflight")
		return got, inflight
	}
	var last string
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("last scheduler events seen: %s", last)
		}
	})
	proctest.WaitFor(t, "the scheduler service to see every lease released", func() bool {
		got, inflight := events()
		last = fmt.Sprintf("%v, in flight %v", got, inflight)
		return got["done"]+got["cancelled"] >= 2*perGW && inflight == 0
	}, sched)
	got, _ := events()
	// A stream the client read to its end may still be released as
	// cancelled: the bench client (like OpenAI's SDKs) closes the
	// connection at `data: [DONE]`, and when that close reaches the
	// gateway before the upstream's EOF, the gateway counts the lease as
	// cancelled. Every request completed on the client's side (checked
	// above), so both count as released here.
	if got["cancelled"] > 0 {
		t.Logf("%d of %d leases released as cancelled after a complete stream", got["cancelled"], 2*perGW)
	}
	got["released"] = got["done"] + got["cancelled"]
	delete(got, "done")
	delete(got, "cancelled")
	want := map[string]int{"admitted": 2 * perGW, "released": 2 * perGW, "failed": 0, "rejected": 0, "queue_full": 0}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("llmesh_scheduler_events_total{pool=\"engine\"} (-want +got):\n%s", diff)
	}
}

// filterLabel keeps the lines of a Prometheus text exposition that carry
// label (e.g. `pool="engine"`).
func filterLabel(text, label string) string {
	var b strings.Builder
	for _, line := range strings.Split(text, "\n") {
		if strings.Contains(line, label) {
			b.WriteString(line)
			b.WriteByte('\n')
		}
	}
	return b.String()
}
