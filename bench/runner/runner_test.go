package runner

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/llmesh/llmesh/bench/benchtest"
	"github.com/llmesh/llmesh/bench/client"
	"github.com/llmesh/llmesh/bench/result"
	"github.com/llmesh/llmesh/bench/stats"
	"github.com/llmesh/llmesh/bench/workload"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func compile(t *testing.T, y string) *workload.Workload {
	t.Helper()
	s, err := workload.Parse([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	s.Default()
	w, err := workload.Compile(s, workload.CompileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func TestOpenLoop(t *testing.T) {
	srv := benchtest.Start(t, benchtest.Config{ITL: 100 * time.Microsecond})
	w := compile(t, `
requests: 200
warmup: {requests: 10}
arrival: {process: constant, rate: 400}
max_schedule_lag_p99: 1s
classes:
  - {name: a, share: 3, prompt_tokens: {value: 8}, output_tokens: {value: 4}, headers: {x-tenant: a}}
  - {name: b, share: 1, prompt_tokens: {value: 8}, output_tokens: {value: 6}}`)
	c, err := client.New(w.Spec.Protocol, srv.HTTPURL, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var sunk atomic.Int64
	live := &Live{}
	recs, err := Run(context.Background(), Options{Workload: w, Client: c, Live: live, Sink: func(*result.Record) { sunk.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 210 || sunk.Load() != 210 {
		t.Fatalf("%d records, %d sunk; want 210", len(recs), sunk.Load())
	}
	for i, r := range recs {
		if r.Index != i || r.Status != result.StatusOK || (r.Warmup != (i < 10)) {
			t.Fatalf("record %d: %+v", i, r)
		}
		want := 4
		if r.Class == "b" {
			want = 6
		}
		if r.OutputTokens != want || len(r.ChunkNS) != want {
			t.Fatalf("record %d: class %s tokens %d chunks %d", i, r.Class, r.OutputTokens, len(r.ChunkNS))
		}
		if r.SentNS < r.IntendedNS {
			t.Fatalf("record %d sent before its time: %d < %d", i, r.SentNS, r.IntendedNS)
		}
	}
	snap := live.Snapshot()
	if snap.Sent != 210 || snap.Done != 210 || snap.InFlight != 0 || snap.Failed != 0 || len(snap.Classes) != 2 {
		t.Errorf("live %+v", snap)
	}
	rep := stats.Summarize(recs, stats.Meta{Workload: w})
	// 200 requests at 400/s span about half a second.
	// Achieved rate depends on how loaded the machine is; only check it is
	// measured.
	if rep.Completed != 200 || rep.OfferedRPS < 399 || rep.OfferedRPS > 401 || rep.AchievedRPS <= 0 {
		t.Errorf("completed %d offered %.1f achieved %.1f", rep.Completed, rep.OfferedRPS, rep.AchievedRPS)
	}
}

func TestClosedLoop(t *testing.T) {
	srv := benchtest.Start(t, benchtest.Config{TTFT: time.Millisecond})
	w := compile(t, `
requests: 60
protocol: grpc-llm-v1
arrival: {process: closed, concurrency: 4}
classes: [{name: a, prompt_tokens: {value: 8}, output_tokens: {value: 3}}]`)
	c, err := client.New(w.Spec.Protocol, srv.GRPCAddr, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	recs, err := Run(context.Background(), Options{Workload: w, Client: c})
	if err != nil {
		t.Fatal(err)
	}
	rep := stats.Summarize(recs, stats.Meta{Workload: w})
	if len(recs) != 60 || rep.Completed != 60 || rep.MaxConcurrentRequests > 4 || rep.MaxConcurrentRequests < 2 {
		t.Errorf("records %d completed %d max concurrency %d", len(recs), rep.Completed, rep.MaxConcurrentRequests)
	}
}

// Interrupting a run keeps everything that completed and marks requests in
// flight as cancelled.
func TestCancelKeepsPartialResults(t *testing.T) {
	srv := benchtest.Start(t, benchtest.Config{ITL: 20 * time.Millisecond})
	w := compile(t, `
duration: 1h
arrival: {process: constant, rate: 100}
classes: [{name: a, prompt_tokens: {value: 8}, output_tokens: {value: 10}}]`)
	c, _ := client.New(w.Spec.Protocol, srv.HTTPURL, 0)
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	var ok atomic.Int64
	recs, err := Run(ctx, Options{Workload: w, Client: c, Sink: func(r *result.Record) {
		if r.Status == result.StatusOK && ok.Add(1) == 20 {
			cancel()
		}
	}})
	if err != context.Canceled {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	var okN, cancelled int
	for _, r := range recs {
		switch r.Status {
		case result.StatusOK:
			okN++
		case result.StatusCancelled:
			cancelled++
		default:
			t.Errorf("unexpected %+v", r)
		}
	}
	if okN < 20 || cancelled == 0 {
		t.Errorf("ok %d cancelled %d", okN, cancelled)
	}
}

func TestErrorsAreRecorded(t *testing.T) {
	srv := benchtest.Start(t, benchtest.Config{})
	w := compile(t, `
requests: 20
arrival: {process: constant, rate: 1000}
classes: [{name: a, prompt_tokens: {value: 8}, output_tokens: {value: 2}, headers: {x-benchtest-fault: "500"}}]`)
	c, _ := client.New(w.Spec.Protocol, srv.HTTPURL, 0)
	defer c.Close()
	recs, err := Run(context.Background(), Options{Workload: w, Client: c})
	if err != nil {
		t.Fatal(err)
	}
	rep := stats.Summarize(recs, stats.Meta{Workload: w})
	if rep.Failed != 20 || rep.Valid || !strings.Contains(strings.Join(rep.InvalidReasons, ";"), "no request completed") {
		t.Errorf("failed %d valid %v reasons %v", rep.Failed, rep.Valid, rep.InvalidReasons)
	}
}

// A gateway in front of the sim: the engine's ground truth says the
// (continued) request was never preempted, the gateway's Server-Timing
// trailer says twice. The record keeps the gateway's count.
func TestGatewayPreemptionsWinOverEngine(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Trailer", "Server-Timing")
		w.Header().Set("Server-Timing", `queue;dur=3.5`)
		fmt.Fprint(w, `data: {"choices":[{"index":0,"text":" a"}]}`+"\n\n")
		fmt.Fprint(w, `data: {"choices":[{"index":0,"text":" b","finish_reason":"length"}],"llmesh_engine":{"arrival_ns":1,"first_scheduled_ns":2,"first_token_ns":3,"finish_ns":4,"preemptions":0}}`+"\n\n")
		fmt.Fprint(w, "data: [DONE]\n\n")
		w.Header().Set("Server-Timing", `queue;dur=3.5, preemptions;desc="2"`)
	}))
	defer srv.Close()
	w := compile(t, `
requests: 3
arrival: {process: constant, rate: 100}
classes: [{name: a, prompt_tokens: {value: 8}, output_tokens: {value: 2}}]`)
	c, err := client.New(w.Spec.Protocol, srv.URL, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	recs, err := Run(context.Background(), Options{Workload: w, Client: c})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range recs {
		if r.Engine == nil || r.LLMesh == nil || r.Preemptions != 2 {
			t.Errorf("record %d: preemptions %d (engine %+v, llmesh %+v), want the gateway's 2", i, r.Preemptions, r.Engine, r.LLMesh)
		}
	}
}
