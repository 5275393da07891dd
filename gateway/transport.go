package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llmesh/llmesh/clock"
	"github.com/llmesh/llmesh/exchange"
)

// errPreemptSignal is the cancellation cause of an attempt stopped because
// its lease asked for preemption.
var errPreemptSignal = errors.New("gateway: preemption requested")

// attempt is one upstream request of an exchange. Its context ends when
// the client goes away, the lease is preempted, the upstream stalls, or the
// attempt is stopped; Cause tells which.
type attempt struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	clk    clock.Clock
	idleMu sync.Mutex // guards idle between newAttempt, checkIdle and stop
	idle   clock.Timer
	idleD  time.Duration
	// last is the clock's UnixNano of the last upstream activity. The idle
	// timer checks it when it fires and re-arms for the rest, so a chunk
	// costs one atomic store instead of a timer reset.
	last atomic.Int64
	// touchStep is how far a later activity must be from last to be
	// stored.
	touchStep int64
	done      chan struct{}
	// holdOn: a preemption signal no longer ends the attempt (resume off,
	// once the stream sent a byte); set by the handler goroutine, read by
	// the preemption watcher.
	holdOn atomic.Bool
}

// maxTouchStep bounds how stale the idle check's view of the upstream's
// last activity may be.
const maxTouchStep = time.Millisecond

// newAttempt starts the attempt's watchers: an idle timer, and, for a
// preemptible lease, a goroutine that turns Preempt into cancellation. The
// goroutine is owned by the attempt and ends with its context; stop waits
// for it.
func (x *clientExchange) newAttempt(parent context.Context) *attempt {
	ctx, cancel := context.WithCancelCause(parent)
	a := &attempt{ctx: ctx, cancel: cancel, clk: x.g.clock, idleD: x.rt.cfg.StreamIdleTimeout}
	if a.idleD > 0 {
		a.touchStep = int64(min(a.idleD/64, maxTouchStep))
		a.last.Store(a.clk.Now().UnixNano())
		a.idleMu.Lock()
		a.idle = a.clk.AfterFunc(a.idleD, a.checkIdle)
		a.idleMu.Unlock()
	}
	if l := x.core.View().Lease; l != nil && x.preemptible {
		pre := l.Preempt()
		a.done = make(chan struct{})
		go func() {
			defer close(a.done)
			select {
			case <-pre:
				if a.holdOn.Load() {
					<-ctx.Done() // resume off: the stream runs to its end
					return
				}
				cancel(errPreemptSignal)
			case <-ctx.Done():
			}
		}()
	}
	return a
}

// touch records upstream activity at t. An activity within touchStep of
// the last one stored is not stored: the idle check then finds the
// upstream silent for at most touchStep (1/64 of the timeout, at most a
// millisecond) longer than it was, and a stream of chunks costs a load
// and a compare per chunk (a plain load on amd64 and arm64) instead of an
// atomic store.
func (a *attempt) touch(t time.Time) {
	if ns := t.UnixNano(); ns-a.last.Load() >= a.touchStep {
		a.last.Store(ns)
	}
}

// checkIdle runs when the idle timer fires: it ends the attempt when the
// upstream has been silent for the whole timeout, else re-arms for the rest.
func (a *attempt) checkIdle() {
	if a.ctx.Err() != nil {
		return
	}
	silent := time.Duration(a.clk.Now().UnixNano() - a.last.Load())
	if silent >= a.idleD {
		a.cancel(ErrUpstreamStalled)
		return
	}
	a.idleMu.Lock()
	a.idle.Reset(a.idleD - silent)
	a.idleMu.Unlock()
}

// cause is why the attempt's context ended, nil while it runs.
func (a *attempt) cause() error {
	if a.ctx.Err() == nil {
		return nil
	}
	return context.Cause(a.ctx)
}

// stop ends the attempt and waits for its watcher.
func (a *attempt) stop() {
	a.cancel(context.Canceled)
	a.idleMu.Lock()
	if a.idle != nil {
		a.idle.Stop()
	}
	a.idleMu.Unlock()
	if a.done != nil {
		<-a.done
	}
}

// attemptTransport is the ReverseProxy's transport: it sends the buffered
// request body, holds the response until its first body bytes arrive (so
// that a preemption before anything reached the client only requeues), and
// wraps the body in a stream that observes, times out and splices.
type attemptTransport struct {
	base http.RoundTripper
}

func (t *attemptTransport) RoundTrip(outreq *http.Request) (*http.Response, error) {
	x, _ := outreq.Context().Value(exchangeKey{}).(*clientExchange)
	if x == nil {
		return t.base.RoundTrip(outreq)
	}
	for {
		a := x.newAttempt(outreq.Context())
		res, err := send(t.base, x, a, outreq, x.body)
		if err == nil && retryStatus(res.StatusCode) && x.canRetry(outreq.Context()) {
			res.Body.Close()
			a.stop()
			if rerr := x.retryElsewhere(outreq.Context(), exchange.EndFailed); rerr != nil {
				return nil, rerr
			}
			continue
		}
		if err == nil {
			s := newStream(x, a, t.base, outreq, res)
			err = s.prime()
			if err == nil && emptyCut(s) && a.cause() == nil && x.canRetry(outreq.Context()) {
				// The engine went away before its first byte: nothing
				// reached the client.
				err = s.upErr
			}
			if err == nil {
				return s.response(), nil
			}
			s.releasePrime()
			res.Body.Close()
		}
		cause := a.cause()
		a.stop()
		if cause == nil && x.canRetry(outreq.Context()) {
			how := exchange.EndFailed
			if unreachable(err) {
				how = exchange.EndUnreachable
			}
			if rerr := x.retryElsewhere(outreq.Context(), how); rerr != nil {
				return nil, rerr
			}
			continue
		}
		switch {
		case errors.Is(cause, errPreemptSignal) && outreq.Context().Err() == nil:
			// Nothing reached the client: requeue at the front of the class.
			x.core.Requeued(exchange.EndPreempted)
			if aerr := x.admitAgain(outreq.Context()); aerr != nil {
				return nil, aerr
			}
			continue
		case errors.Is(cause, ErrUpstreamStalled):
			return nil, fmt.Errorf("%w: no response within %v", ErrUpstreamStalled, a.idleD)
		}
		return nil, err
	}
}

// send issues one upstream request with body.
func send(base http.RoundTripper, x *clientExchange, a *attempt, outreq *http.Request, body []byte) (*http.Response, error) {
	// A shallow copy: RoundTrippers do not modify the request, and nothing
	// changes outreq's headers once it is sent, so they need no deep copy.
	req := outreq.WithContext(a.ctx)
	req.Body = io.NopCloser(bytes.NewReader(body))
	req.ContentLength = int64(len(body))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	if len(body) == 0 {
		req.Body = http.NoBody
	}
	endpoint := x.routeToLease(req)
	// Stamped as the last step before the send, so that upstream TTFT
	// holds no gateway work of its own.
	x.core.UpstreamSent(x.g.clock.Now(), endpoint)
	return base.RoundTrip(req)
}
