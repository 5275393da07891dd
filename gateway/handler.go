package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/llmesh/llmesh/exchange"
	"github.com/llmesh/llmesh/scheduler"
)

// clientExchange is the gateway's side of one client request across its
// upstream attempts (a requeue after preemption and a mid-stream
// continuation are further attempts): the core's per-request sequence
// (exchange.Exchange) plus what only the gateway has, the body it resends
// and the route it proxies to. It is owned by the request's handler
// goroutine; only the preemption watcher of the current attempt touches
// it from elsewhere, and only through the attempt's context.
type clientExchange struct {
	core exchange.Exchange
	cfg  exchange.ExchangeConfig
	g    *Gateway
	rt   *compiled
	pool *compiledPool
	// body is the request body as it goes upstream (guarded), reused by
	// every attempt.
	body []byte
	// preemptible: the lease may fire Preempt for this request.
	preemptible bool
	// retried: the request was sent once more after a failure before any
	// byte reached the client (retry.go).
	retried bool
	// pickErr refuses a request whose upstream pick the pool cannot
	// honour (endpoint.go).
	pickErr error
}

type exchangeKey struct{}

// fanout hands each Record to every recorder of the gateway.
type fanout struct{ g *Gateway }

func (f fanout) Record(r Record) { f.g.record(r) }

// newExchange starts the core's sequence for r with its head: routed to
// pool, received at recv, body read (nil when none).
func (g *Gateway) newExchange(rt *compiled, pool *compiledPool, r *http.Request, recv time.Time, body []byte,
	routeClass string, passthrough bool) *clientExchange {
	x := &clientExchange{g: g, rt: rt, pool: pool, body: body}
	x.cfg = exchange.ExchangeConfig{
		Classifier:      g.classifier.Load(),
		DefaultClass:    rt.cfg.DefaultClass,
		SizeBody:        true,
		GuardMaxMessage: int(rt.cfg.MaxRequestBytes),
		KeepOutput:      g.admitter != nil,
		Observer:        exchange.Options{GeneralScan: g.generalScan, GapBuckets: g.gapBuckets},
		Recorder:        fanout{g},
		Misuse:          g.onMisuse,
	}
	peer, _ := netip.ParseAddrPort(r.RemoteAddr)
	var pin string
	pin, x.pickErr = pool.upstreamPick(r.Header)
	x.core.Start(&x.cfg, exchange.RequestHead{
		Path:            r.URL.Path,
		ContentType:     r.Header.Get("Content-Type"),
		ContentEncoding: r.Header.Get("Content-Encoding"),
		GRPCEncoding:    r.Header.Get("Grpc-Encoding"),
		Headers:         r.Header,
		Peer:            peer.Addr().Unmap(),
		Received:        recv,
		ID:              requestID(r),
		Pool:            pool.Name,
		RouteClass:      routeClass,
		ClassPriority:   pool.ClassPriority,
		Passthrough:     passthrough,
		AffinityHeader:  pool.AffinityHeader,
		HashPrefix:      pool.PrefixRouting,
		HasBody:         len(body) > 0,
		Pin:             pin,
	})
	return x
}

// ServeHTTP is the data-plane handler: route, read the body, drive the
// core's sequence (classify, size, guard, admit), proxy, release.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rt := g.cfg.Load()
	recv := g.clock.Now()
	w = newDeadlineWriter(w, rt.cfg.Limits.ClientWriteTimeout)
	kind := grpcKind(r)
	pool, routeClass, gen, ok := rt.match(r.URL.Path, r.Header.Get, kind != exchange.GRPCNone)
	if !ok {
		reply(w, kind, fmt.Errorf("%w for %s", exchange.ErrNoRoute, r.URL.Path))
		return
	}
	if pool.Arm != "" {
		w.Header().Set(ArmHeader, pool.Arm) // on errors too: the arm refused it
	}
	body, releaseBody, err := g.readBodyBounded(w, r, rt.cfg.MaxRequestBytes, rt.cfg.Limits)
	defer releaseBody()
	if err != nil {
		if errors.Is(err, ErrBodyBudget) || errors.Is(err, ErrBodyTimeout) {
			reply(w, kind, err)
			return
		}
		if errors.Is(err, ErrBodyTooLarge) {
			reply(w, kind, fmt.Errorf("%w: request body exceeds max_request_bytes (%d bytes)", exchange.ErrRequestTooLarge, rt.cfg.MaxRequestBytes))
			return
		}
		reply(w, kind, fmt.Errorf("%w: reading request body: %w", exchange.ErrBadRequest, err))
		return
	}
	x := g.newExchange(rt, pool, r, recv, body, routeClass, !gen.Match(r.Method, r.URL.Path))
	defer x.finish()
	if err := x.pickErr; err != nil {
		reply(w, kind, err)
		x.core.Finish(g.clock.Now(), exchange.EndRefused, err)
		return
	}
	// The gateway has the whole body anyway: it is always read for the
	// model and sizes, then guarded (retries and continuations reuse the
	// guarded body; relocation ran before, in front of the handler).
	if err := x.core.Size(body, r.Header); err != nil {
		reply(w, kind, err)
		x.core.Finish(g.clock.Now(), exchange.EndRefused, err)
		return
	}
	if x.body, err = x.guard(body); err != nil {
		reply(w, kind, err)
		x.core.Finish(g.clock.Now(), exchange.EndRefused, err)
		return
	}
	body = x.body
	if v := x.core.View(); g.admitter != nil && !v.Passthrough {
		lease, err := g.admitter.Admit(r.Context(), v.Request)
		if err != nil {
			reply(w, kind, err)
			// A cancelled admission is the client gone (the core tells).
			x.core.Finish(g.clock.Now(), exchange.EndRefused, err)
			return
		}
		x.core.Admitted(g.clock.Now(), lease)
		x.preemptible = rt.cfg.PreemptibleClasses == nil || rt.cfg.PreemptibleClasses[v.Class.Name]
	} else {
		x.core.Admitted(g.clock.Now(), nil)
	}
	if rt.cfg.ServerTiming {
		w.Header().Set("Server-Timing", x.core.ServerTiming(g.clock.Now(), false))
	}
	r.Body = http.NoBody
	r.ContentLength = int64(len(body))
	ctx := context.WithValue(r.Context(), exchangeKey{}, x)
	defer func() {
		// ReverseProxy aborts with http.ErrAbortHandler when the client goes
		// away mid-copy (or after the stream ended the response itself,
		// whose ending stands); any other panic is a fault. End before the
		// panic goes on (net/http logs it and closes the connection).
		if p := recover(); p != nil {
			how := exchange.EndFault
			if p == http.ErrAbortHandler {
				how = exchange.EndClientGone
			}
			x.core.End(g.clock.Now(), how, nil)
			panic(p)
		}
	}()
	g.proxy(pool).ServeHTTP(w, r.WithContext(ctx))
}

// guard runs the core's engine-priority guard on the body as read for
// admission; err is the refusal, which the core's reply table answers
// (400 / INVALID_ARGUMENT, 415 for a compressed JSON body, or 413 /
// RESOURCE_EXHAUSTED past max_request_bytes once decompressed).
func (x *clientExchange) guard(body []byte) ([]byte, error) {
	if err := x.core.View().Plan.Refuse; err != nil {
		return nil, err
	}
	out, _, err := x.core.Guard(body)
	if errors.Is(err, exchange.ErrPriorityTooLarge) {
		return nil, fmt.Errorf("%w (max_request_bytes)", err)
	}
	return out, err
}

// relocationRefused records a request that the relocation in front of the
// handler answered itself (relocatehttp's OnRefused): routed and
// classified from its headers as the handler would, never admitted.
func (g *Gateway) relocationRefused(r *http.Request, err error) {
	rt := g.cfg.Load()
	now := g.clock.Now()
	pool, routeClass, gen, ok := rt.match(r.URL.Path, r.Header.Get, grpcKind(r) != exchange.GRPCNone)
	if !ok {
		return
	}
	x := g.newExchange(rt, pool, r, now, nil, routeClass, !gen.Match(r.Method, r.URL.Path))
	x.core.End(now, exchange.EndRefused, err)
}

// output is the text generated so far (kept for spliceable requests).
func (x *clientExchange) output() string {
	return string(x.core.View().Output())
}

// finish ends the request: a response the handler saw to its end, unless
// something ended it before (that ending stands).
func (x *clientExchange) finish() {
	if x.core.State() != exchange.StateEnded {
		x.core.End(x.g.clock.Now(), exchange.EndCompleted, nil)
	}
}

// admitAgain queues the request again at the front of its class after a
// preemption (x.core.Requeued released the last lease).
func (x *clientExchange) admitAgain(ctx context.Context) error {
	if x.g.admitter == nil {
		return nil
	}
	req := x.core.View().Request
	req.Requeue = true
	lease, err := x.g.admitter.Admit(ctx, req)
	if err != nil {
		return err
	}
	x.core.Admitted(x.g.clock.Now(), lease)
	return nil
}

// errorHandler answers requests whose upstream attempt failed before any
// response byte reached the client.
func (g *Gateway) errorHandler(w http.ResponseWriter, r *http.Request, err error) {
	x, _ := r.Context().Value(exchangeKey{}).(*clientExchange)
	kind := grpcKind(r)
	end := func(how exchange.Ending) {
		if x != nil {
			x.core.Finish(g.clock.Now(), how, err)
		}
	}
	switch {
	case r.Context().Err() != nil && !errors.Is(err, ErrUpstreamStalled):
		end(exchange.EndClientGone)
		return // client gone
	case isAdmitErr(err):
		end(exchange.EndRefused)
		reply(w, kind, err)
	case errors.Is(err, ErrUpstreamStalled):
		end(exchange.EndFailed)
		reply(w, kind, err)
	case unreachable(err): // the connection failed: the picker ejects the endpoint
		end(exchange.EndUnreachable)
		reply(w, kind, fmt.Errorf("%w: %w", exchange.ErrUpstream, err))
	default:
		end(exchange.EndFailed)
		reply(w, kind, fmt.Errorf("%w: %w", exchange.ErrUpstream, err))
	}
}

func isAdmitErr(err error) bool {
	for _, s := range []error{scheduler.ErrQueueFull, scheduler.ErrRejected, scheduler.ErrPreempted,
		scheduler.ErrCancelled, scheduler.ErrUnavailable, scheduler.ErrClosed} {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

var idSeq atomic.Uint64

// requestID is unique per request in this process (the scheduler counts
// preemptions by ID, so two clients reusing an x-request-id must not share
// one); the client's x-request-id, when given, leads it for log correlation.
func requestID(r *http.Request) string {
	seq := "gw-" + strconv.FormatUint(idSeq.Add(1), 36) + "-" + idEpoch
	if id := r.Header.Get("X-Request-Id"); id != "" && len(id) <= 128 {
		return id + "/" + seq
	}
	return seq
}

// idEpoch tells processes apart for the shared scheduler service.
var idEpoch = strconv.FormatInt(time.Now().UnixNano(), 36)

// Record is what the gateway reports per request to its recorders: the
// core's Record, the same the Envoy host reports.
type Record = exchange.Record
