package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llmesh/llmesh/filter"
	"github.com/llmesh/llmesh/scheduler"
)

// exchange is the state of one client request across its upstream
// attempts (a requeue after preemption and a mid-stream continuation are
// further attempts). It is owned by the request's handler goroutine; only
// the preemption watcher of the current attempt touches it from elsewhere,
// and only through the attempt's context.
type exchange struct {
	g       *Gateway
	rt      *compiled
	pool    *compiledPool
	grpc    bool
	class   string
	body    []byte
	meta    filter.RequestMeta
	sreq    scheduler.Request
	recv    time.Time
	admitAt time.Time

	lease       scheduler.Lease
	releaseOnce sync.Once
	outcome     scheduler.Outcome

	// preemptible: the lease may fire Preempt for this request.
	preemptible bool
	// passthrough: not a generation call (model list, health…): proxied
	// without admission and recorded apart.
	passthrough bool
	preemptions int
	// termErr is the gateway-side error that ended the response, if any.
	termErr error
	// endpoint is where the last upstream attempt went (routeToLease).
	endpoint string

	obs *meter
}

type exchangeKey struct{}

// ServeHTTP is the data-plane handler: route, classify, read the body,
// admit, proxy, observe, release.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rt := g.cfg.Load()
	recv := g.clock.Now()
	grpcReq := isGRPC(r)
	pool, routeClass, gen, ok := rt.match(r.URL.Path, r.Header.Get, grpcReq)
	if !ok {
		reply(w, grpcReq, fmt.Errorf("%w for %s", filter.ErrNoRoute, r.URL.Path))
		return
	}
	if pool.Arm != "" {
		w.Header().Set(ArmHeader, pool.Arm) // on errors too: the arm refused it
	}
	body, err := readBody(r.Body, rt.cfg.MaxRequestBytes)
	if err != nil {
		if errors.Is(err, ErrBodyTooLarge) {
			reply(w, grpcReq, fmt.Errorf("%w: request body exceeds max_request_bytes (%d bytes)", filter.ErrRequestTooLarge, rt.cfg.MaxRequestBytes))
			return
		}
		reply(w, grpcReq, fmt.Errorf("%w: reading request body: %w", filter.ErrBadRequest, err))
		return
	}
	x := &exchange{g: g, rt: rt, pool: pool, grpc: grpcReq, recv: recv, passthrough: !gen.Match(r.Method, r.URL.Path)}
	x.meta = filter.ReadRequestMeta(r.URL.Path, body, grpcReq)
	x.class = g.classify(r, routeClass, x.meta.Model)
	if x.class == "" {
		x.class = rt.cfg.DefaultClass
	}
	if x.body, err = g.guardPriority(r, rt, pool, x.class, body, grpcReq); err != nil {
		reply(w, grpcReq, err)
		g.recordRefused(refusal{recv: recv, grpc: grpcReq, method: r.URL.Path, class: x.class, model: x.meta.Model,
			pool: pool.Name, passthrough: x.passthrough, err: err})
		return
	}
	body = x.body
	x.obs = g.newMeter(x, r)
	x.sreq = scheduler.Request{
		ID:           requestID(r),
		Pool:         pool.Name,
		Class:        x.class,
		PromptTokens: x.meta.PromptTokens,
		MaxTokens:    x.meta.MaxTokens,
		Arrival:      recv,
		Affinity:     pool.affinity(r.Header),
	}
	defer x.finish()
	if g.admitter != nil && !x.passthrough {
		lease, err := g.admitter.Admit(r.Context(), x.sreq)
		if err != nil {
			x.termErr = err
			x.outcome = scheduler.Failed
			if errors.Is(err, scheduler.ErrCancelled) {
				x.outcome = scheduler.Cancelled
			} else {
				x.obs.refused(err)
			}
			reply(w, grpcReq, err)
			return
		}
		x.lease = lease
		x.preemptible = rt.cfg.PreemptibleClasses == nil || rt.cfg.PreemptibleClasses[x.class]
	}
	x.admitAt = g.clock.Now()
	x.obs.admitted(x.admitAt)
	if rt.cfg.ServerTiming {
		w.Header().Set("Server-Timing", x.obs.serverTiming(false))
	}
	r.Body = http.NoBody
	r.ContentLength = int64(len(body))
	ctx := context.WithValue(r.Context(), exchangeKey{}, x)
	defer func() {
		// ReverseProxy aborts with http.ErrAbortHandler when the client goes
		// away mid-copy; any other panic is a failure. Release before the
		// panic goes on (net/http logs it and closes the connection).
		if p := recover(); p != nil {
			if x.outcome == scheduler.Done {
				x.outcome = scheduler.Failed
				if p == http.ErrAbortHandler {
					x.outcome = scheduler.Cancelled
				}
			}
			x.finish()
			panic(p)
		}
	}()
	g.proxy(pool).ServeHTTP(w, r.WithContext(ctx))
}

// relocationRefused records a request that the relocation in front of the
// handler answered itself (relocatehttp's OnRefused): routed and
// classified from its headers as the handler would, never admitted.
func (g *Gateway) relocationRefused(r *http.Request, err error) {
	rt := g.cfg.Load()
	now := g.clock.Now()
	grpcReq := isGRPC(r)
	pool, routeClass, gen, ok := rt.match(r.URL.Path, r.Header.Get, grpcReq)
	if !ok {
		return
	}
	class := g.classify(r, routeClass, "")
	if class == "" {
		class = rt.cfg.DefaultClass
	}
	opts := filter.Options{GapBuckets: g.gapBuckets}
	if grpcReq {
		opts.GRPCMethod = r.URL.Path
	}
	g.recordRefused(refusal{recv: now, grpc: grpcReq, method: r.URL.Path, class: class, model: "", pool: pool.Name,
		passthrough: !gen.Match(r.Method, r.URL.Path), err: err})
}

// refusal is a request the gateway answered itself before admission.
type refusal struct {
	recv         time.Time
	grpc         bool
	method       string
	class, model string
	pool         string
	passthrough  bool
	err          error
}

// recordRefused records a request the gateway refused before admission
// (relocation, the engine-priority guard), as the Envoy host records its
// local replies: the error, no response.
func (g *Gateway) recordRefused(f refusal) {
	opts := filter.Options{GapBuckets: g.gapBuckets}
	if f.grpc {
		opts.GRPCMethod = f.method
	}
	o := filter.GetObserver(opts)
	o.MarkReceived(f.recv)
	o.SetError(filter.ErrorHTTPStatus, f.err.Error())
	o.Finish(g.clock.Now(), nil)
	ob := o.Observation()
	filter.PutObserver(o)
	g.record(Record{Observation: ob, Class: f.class, Model: f.model, Pool: f.pool, Outcome: scheduler.Failed, Err: f.err,
		Passthrough: f.passthrough})
}

// finish releases the lease once and records the observation.
func (x *exchange) finish() {
	x.releaseOnce.Do(func() {
		if x.lease != nil {
			x.lease.Release(x.outcome)
		}
		x.obs.end(x)
	})
}

// releaseForRetry ends the current admission as preempted; a new one
// follows through admitAgain.
func (x *exchange) releaseForRetry() {
	x.preemptions++
	if x.lease != nil {
		x.lease.Release(scheduler.Preempted)
		x.lease = nil
	}
}

// admitAgain queues the request again at the front of its class after a
// preemption.
func (x *exchange) admitAgain(ctx context.Context) error {
	if x.g.admitter == nil {
		return nil
	}
	req := x.sreq
	req.Requeue = true
	lease, err := x.g.admitter.Admit(ctx, req)
	if err != nil {
		return err
	}
	x.lease = lease
	return nil
}

// errorHandler answers requests whose upstream attempt failed before any
// response byte reached the client.
func (g *Gateway) errorHandler(w http.ResponseWriter, r *http.Request, err error) {
	x, _ := r.Context().Value(exchangeKey{}).(*exchange)
	grpcReq := isGRPC(r)
	if x != nil {
		if x.termErr == nil {
			x.termErr = err
		}
		if x.outcome == scheduler.Done {
			x.outcome = scheduler.Failed
		}
	}
	switch {
	case r.Context().Err() != nil && !errors.Is(err, ErrUpstreamStalled):
		if x != nil {
			x.outcome = scheduler.Cancelled
		}
		return // client gone
	case isAdmitErr(err):
		if x != nil {
			x.obs.refused(err)
		}
		reply(w, grpcReq, err)
	case errors.Is(err, ErrUpstreamStalled):
		reply(w, grpcReq, err)
	default:
		reply(w, grpcReq, fmt.Errorf("%w: %w", filter.ErrUpstream, err))
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

// readBody reads at most limit bytes; more is ErrBodyTooLarge.
func readBody(rc io.ReadCloser, limit int64) ([]byte, error) {
	if rc == nil || rc == http.NoBody {
		return nil, nil
	}
	defer rc.Close()
	var buf bytes.Buffer
	n, err := io.Copy(&buf, io.LimitReader(rc, limit+1))
	if err != nil {
		return nil, err
	}
	if n > limit {
		return nil, ErrBodyTooLarge
	}
	return buf.Bytes(), nil
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
