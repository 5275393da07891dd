package faults

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/llmesh/llmesh/api/llmv1"
	"github.com/llmesh/llmesh/gateway"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/sim/simtest"
	"github.com/llmesh/llmesh/testkit/proctest"
)

// TestEngineKilledMidStreamSSE kills the engine (every connection to it at
// once) while a stream is flowing: the client's stream ends with an OpenAI
// error event and no [DONE], the scheduler frees the slot with a Failed
// outcome, and the gateway's observation records the reset.
func TestEngineKilledMidStreamSSE(t *testing.T) {
	s := simtest.Start(t, simtest.WithTimeScale(1)) // real time: 2000 tokens take seconds
	k := proctest.NewKillable(t, strings.TrimPrefix(s.HTTPURL, "http://"))
	sched := newScheduler(t, "fifo", 4)
	rec := newRecorder()
	gw := startGateway(t, gateway.Config{Pools: pools("http://"+k.Addr(), "")}, gateway.WithAdmitter(sched), gateway.WithRecorder(rec))

	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	res, err := send(ctx, gw, completion(s.Model, 2000, "the engine dies under this request"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("status %d", res.StatusCode)
	}
	rd := newSSEReader(res.Body)
	for i := 0; i < 3; i++ {
		if e, ok := rd.next(); !ok || e.event != "" || !strings.Contains(e.data, `"text"`) {
			t.Fatalf("event %d before the kill: %+v (ok %v)", i, e, ok)
		}
	}
	k.Kill()
	var rest []sse
	for {
		e, ok := rd.next()
		if !ok {
			break
		}
		rest = append(rest, e)
	}
	if len(rest) == 0 {
		t.Fatal("stream ended without an error event")
	}
	last := rest[len(rest)-1]
	if last.event != "error" || !strings.Contains(last.data, `"error"`) {
		t.Errorf("last event %+v, want an error event", last)
	}
	for _, e := range rest {
		if e.data == "[DONE]" {
			t.Errorf("[DONE] after the engine died: the client would think the answer complete")
		}
	}

	r := rec.next(t)
	if r.OK() || !errors.Is(r.Err, gateway.ErrUpstreamReset) || r.Outcome != scheduler.Failed {
		t.Errorf("record ok=%v err=%v outcome=%v, want a failed record with ErrUpstreamReset", r.OK(), r.Err, r.Outcome)
	}
	if r.TokenChunks < 3 || r.Complete {
		t.Errorf("record token chunks %d complete %v: the observation must keep what streamed before the kill", r.TokenChunks, r.Complete)
	}
	poll.Until(t, "slot freed", func() (bool, string) { return idle(poolStats(t, sched.Stats(), "sim")) })
	if c := poolStats(t, sched.Stats(), "sim").Counters; c.Failed != 1 || c.Done != 0 {
		t.Errorf("counters %+v, want exactly one failed", c)
	}
}

// TestEngineKilledMidStreamGRPC does the same to an llm.v1 stream: the
// client gets a gRPC UNAVAILABLE status after the tokens it already had.
func TestEngineKilledMidStreamGRPC(t *testing.T) {
	s := simtest.Start(t, simtest.WithTimeScale(1))
	k := proctest.NewKillable(t, s.GRPCAddr)
	sched := newScheduler(t, "fifo", 4)
	rec := newRecorder()
	gw := startGateway(t, gateway.Config{Pools: pools("http://"+k.Addr(), k.Addr())}, gateway.WithAdmitter(sched), gateway.WithRecorder(rec))

	conn, err := grpc.NewClient(strings.TrimPrefix(gw, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	st, err := llmv1.NewGenerationClient(conn).Generate(ctx, &llmv1.GenerateRequest{Model: s.Model, Prompt: "the engine dies under this request", MaxTokens: 2000})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if _, err := st.Recv(); err != nil {
			t.Fatalf("message %d before the kill: %v", i, err)
		}
	}
	k.Kill()
	for {
		_, err = st.Recv()
		if err != nil {
			break
		}
	}
	if err == io.EOF || status.Code(err) != codes.Unavailable {
		t.Errorf("stream ended with %v, want UNAVAILABLE", err)
	}
	r := rec.next(t)
	if r.OK() || r.Outcome != scheduler.Failed {
		t.Errorf("record ok=%v err=%v outcome=%v, want failed", r.OK(), r.Err, r.Outcome)
	}
	poll.Until(t, "slot freed", func() (bool, string) { return idle(poolStats(t, sched.Stats(), "sim-grpc")) })
	if c := poolStats(t, sched.Stats(), "sim-grpc").Counters; c.Failed != 1 {
		t.Errorf("counters %+v, want one failed", c)
	}
}

// TestEngineStallIdleTimeout makes the engine pause a stream after its
// first token for far longer than the gateway's idle timeout: the gateway
// ends the stream with an error event naming the stall, cancels the
// upstream request and frees the slot.
func TestEngineStallIdleTimeout(t *testing.T) {
	s := simtest.Start(t, simtest.WithTimeScale(1))
	sched := newScheduler(t, "fifo", 4)
	rec := newRecorder()
	const idleTimeout = 300 * time.Millisecond
	gw := startGateway(t, gateway.Config{Pools: pools(s.HTTPURL, ""), StreamIdleTimeout: idleTimeout},
		gateway.WithAdmitter(sched), gateway.WithRecorder(rec))

	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	start := time.Now()
	res, err := send(ctx, gw, completion(s.Model, 64, "stall after the first token"), map[string]string{"x-llmesh-sim-fault": "stall=1h"})
	if err != nil {
		t.Fatal(err)
	}
	events := readAll(res.Body)
	res.Body.Close()
	took := time.Since(start)
	if len(events) < 2 {
		t.Fatalf("events %+v: want a token then an error", events)
	}
	last := events[len(events)-1]
	if last.event != "error" || !strings.Contains(last.data, "stalled") {
		t.Errorf("last event %+v, want an error event about the stall", last)
	}
	if took >= wait {
		t.Errorf("stream took %v: the idle timeout did not end it", took)
	}
	r := rec.next(t)
	if !errors.Is(r.Err, gateway.ErrUpstreamStalled) || r.Outcome != scheduler.Failed {
		t.Errorf("record err=%v outcome=%v, want ErrUpstreamStalled and Failed", r.Err, r.Outcome)
	}
	poll.Until(t, "slot freed", func() (bool, string) { return idle(poolStats(t, sched.Stats(), "sim")) })
	engineIdleWithin(t, cancelled, s.HTTPURL) // stalled for an hour: only a cancel ends it
}
