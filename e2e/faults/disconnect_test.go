package faults

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/llmesh/llmesh/exchange"
	"github.com/llmesh/llmesh/gateway"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/sim"
	"github.com/llmesh/llmesh/sim/simtest"
)

// disconnectEnv is a real-time sim whose prefill is chunked into 16-token
// steps (a long prompt then takes about a second to prefill), a scheduler
// with one slot, and a gateway in front.
type disconnectEnv struct {
	sim   *simtest.Sim
	sched *scheduler.Scheduler
	rec   *recorder
	gw    string
}

func newDisconnectEnv(t *testing.T) *disconnectEnv {
	s := simtest.Start(t, simtest.WithTimeScale(1), simtest.WithEngine(sim.Config{MaxNumBatchedTokens: 16}))
	sched := newScheduler(t, "fifo", 1)
	rec := newRecorder()
	gw := startGateway(t, gateway.Config{Pools: pools(s.HTTPURL, "")}, gateway.WithAdmitter(sched), gateway.WithRecorder(rec))
	return &disconnectEnv{sim: s, sched: sched, rec: rec, gw: gw}
}

func (e *disconnectEnv) stats(t testing.TB) scheduler.PoolStats {
	return poolStats(t, e.sched.Stats(), "sim")
}

// start sends a request whose response (or error) arrives on the returned
// channel; cancel is the client going away.
func (e *disconnectEnv) start(prompt string, maxTokens int) (cancel context.CancelFunc, res <-chan *http.Response) {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan *http.Response, 1)
	go func() {
		r, err := send(ctx, e.gw, completion(e.sim.Model, maxTokens, prompt), nil) //nolint:bodyclose // the receiver of ch closes it
		if err != nil {
			ch <- nil
			return
		}
		ch <- r
	}()
	return cancel, ch
}

// afterCancel checks what every disconnect must leave behind: one record
// with the Cancelled outcome, a free slot, an empty queue, and an engine
// that stopped working on the request.
func (e *disconnectEnv) afterCancel(t *testing.T) gateway.Record {
	t.Helper()
	r := e.rec.next(t)
	if r.Outcome != scheduler.Cancelled || r.OK() {
		t.Errorf("record outcome %v ok %v err %v, want Cancelled", r.Outcome, r.OK(), r.Err)
	}
	poll.Until(t, "capacity freed", func() (bool, string) { return idle(e.stats(t)) })
	engineIdleWithin(t, cancelled, e.sim.HTTPURL)
	if c := e.stats(t).Counters; c.Cancelled != 1 || c.Done != 0 || c.Failed != 0 {
		t.Errorf("counters %+v, want exactly one cancelled", c)
	}
	return r
}

// longPrompt is about n prompt tokens for the sim's word tokenizer.
func longPrompt(n int) string { return strings.Repeat("word ", n) }

// TestClientGoneWhileQueued: a request waiting for the only slot is
// withdrawn from the queue when its client disconnects; the request holding
// the slot is unaffected and nothing reaches the engine for the withdrawn one.
func TestClientGoneWhileQueued(t *testing.T) {
	e := newDisconnectEnv(t)
	cancelA, resA := e.start("first holds the slot", 2000) //nolint:bodyclose // closed where received
	defer cancelA()
	poll.Until(t, "first admitted", func() (bool, string) {
		p := e.stats(t)
		return p.InFlight == 1, fmt.Sprintf("%+v", p)
	})
	cancelB, resB := e.start("second waits", 8) //nolint:bodyclose // closed where received
	poll.Until(t, "second queued", func() (bool, string) {
		p := e.stats(t)
		return queued(p) == 1, fmt.Sprintf("%+v", p)
	})
	cancelB()
	if r := <-resB; r != nil {
		r.Body.Close()
		t.Errorf("a cancelled client got a response: %d", r.StatusCode)
	}
	r := e.rec.next(t)
	// Never admitted, so no admission was released (Record.Outcome is
	// Done, as in the Envoy host); the cancellation is the error kind.
	if r.Outcome != scheduler.Done || r.ErrorKind != exchange.ErrorCancelled || r.OutputTokens != 0 {
		t.Errorf("queued request's record outcome %v error kind %v tokens %d, want Done (never admitted), cancelled, nothing sent", r.Outcome, r.ErrorKind, r.OutputTokens)
	}
	poll.Until(t, "queue empty", func() (bool, string) {
		p := e.stats(t)
		return queued(p) == 0 && p.InFlight == 1 && p.Cancelled == 1, fmt.Sprintf("%+v", p)
	})
	// The slot holder still streams normally.
	ra := <-resA
	if ra == nil {
		t.Fatal("first request failed")
	}
	defer ra.Body.Close()
	rd := newSSEReader(ra.Body)
	if ev, ok := rd.next(); !ok || ev.event != "" {
		t.Fatalf("first request's stream: %+v", ev)
	}
	cancelA()
	e.rec.next(t)
	poll.Until(t, "capacity freed", func() (bool, string) { return idle(e.stats(t)) })
	engineIdleWithin(t, cancelled, e.sim.HTTPURL)
	if c := e.stats(t).Counters; c.Cancelled != 2 || c.Admitted != 1 {
		t.Errorf("counters %+v, want two cancelled of which one was admitted", c)
	}
}

// TestClientGoneWhilePrefilling: the client disconnects after admission,
// while the engine is still prefilling a long prompt (no token yet).
func TestClientGoneWhilePrefilling(t *testing.T) {
	e := newDisconnectEnv(t)
	cancel, res := e.start(longPrompt(3000), 2000) //nolint:bodyclose // closed where received
	defer cancel()
	poll.Until(t, "engine prefilling", func() (bool, string) {
		running, _, err := engineGauges(e.sim.HTTPURL)
		p := e.stats(t)
		return err == nil && running == 1 && p.InFlight == 1, fmt.Sprintf("engine running %v (%v), scheduler %+v", running, err, p)
	})
	if p := e.stats(t); p.Counters.Done != 0 {
		t.Fatalf("request finished before the disconnect: %+v", p)
	}
	cancel()
	if r := <-res; r != nil {
		r.Body.Close()
	}
	if r := e.afterCancel(t); r.HasTTFT || r.TokenChunks != 0 {
		t.Errorf("record has a first token (chunks %d): the disconnect was not during prefill", r.TokenChunks)
	}
}

// TestClientGoneWhileStreaming: the client disconnects after reading a few
// tokens of a long stream.
func TestClientGoneWhileStreaming(t *testing.T) {
	e := newDisconnectEnv(t)
	cancel, res := e.start("stream for a long time", 2000) //nolint:bodyclose // closed below
	defer cancel()
	r := <-res
	if r == nil {
		t.Fatal("request failed")
	}
	rd := newSSEReader(r.Body)
	for i := 0; i < 3; i++ {
		if ev, ok := rd.next(); !ok || ev.event != "" {
			t.Fatalf("event %d: %+v", i, ev)
		}
	}
	cancel()
	r.Body.Close()
	if rec := e.afterCancel(t); rec.TokenChunks < 3 {
		t.Errorf("record token chunks %d, want the 3 the client read", rec.TokenChunks)
	}
}
