package gateway

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"time"

	"github.com/llmesh/llmesh/filter"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/telemetry"
)

// meter feeds one request's events to the core Observer and hands the
// finished Observation to the gateway's recorders. It is used by the
// request's handler goroutine only.
type meter struct {
	x   *exchange
	o   *filter.Observer
	err error
	// progress reports the stream's progress to the current lease.
	progress filter.ProgressReporter
}

func (g *Gateway) newMeter(x *exchange, r *http.Request) *meter {
	opts := filter.Options{
		KeepOutput:  x.meta.Spliceable && g.admitter != nil,
		GeneralScan: g.generalScan,
		GapBuckets:  g.gapBuckets,
	}
	if x.grpc {
		opts.GRPCMethod = r.URL.Path
	}
	m := &meter{x: x, o: filter.GetObserver(opts)}
	m.o.MarkReceived(x.recv)
	return m
}

func (m *meter) admitted(t time.Time) { m.o.MarkAdmitted(t) }

// upstreamSent marks the send of an attempt. Only attempts before the
// first token count: upstream TTFT is measured to the first token the
// client got, so a continuation's send must not move its start.
func (m *meter) upstreamSent(t time.Time) {
	if !m.o.Progress().FirstToken {
		m.o.MarkUpstreamSent(t)
	}
}

// refused records that the gateway answered the request itself.
func (m *meter) refused(err error) { m.o.SetError(filter.ErrorHTTPStatus, err.Error()) }

func (m *meter) responseHeaders(res *http.Response, t time.Time) {
	m.o.ResponseHeaders(t, res.StatusCode, res.Header)
}

// chunk observes bytes sent to the client and reports progress to the
// lease when the token count moved.
func (m *meter) chunk(b []byte, t time.Time) {
	_ = m.o.Observe(t, b) // parse errors are recorded in the observation
	m.progress.Report(m.x.lease, m.o)
}

func (m *meter) trailers(h http.Header, t time.Time) {
	if h != nil {
		m.o.Trailers(t, h)
	}
}

// failed records the gateway-side error that ended the response.
func (m *meter) failed(err error, t time.Time) {
	if m.err == nil {
		m.err = err
	}
}

// output is the text generated so far (only kept for spliceable requests).
func (m *meter) output() string {
	text, _ := m.o.Output()
	return string(text)
}

func (m *meter) tokens() int { return m.o.Progress().Tokens }

// complete reports whether the protocol's end ([DONE], trailers, a whole
// JSON body) has been observed.
func (m *meter) complete() bool { return m.o.Observation().Complete }

// finished reports whether the stream already carried a finish reason.
func (m *meter) finished() bool {
	ob := m.o.Observation()
	return ob.FinishReason != ""
}

// serverTiming formats the measurement so far with telemetry's
// Server-Timing format. At admission (ending false) that is the queue
// time. When the response is ending, E2E runs to now and TPOT follows
// filter.Observation's definition, (E2E − TTFT) / (OutputTokens − 1) with
// OutputTokens from the usage when the stream reported one: the trailer is
// written before the observation is finished, so the Observer cannot
// compute them yet.
func (m *meter) serverTiming(ending bool) string {
	ob := m.o.Observation()
	if ending && !ob.Received.IsZero() {
		ob.E2E = m.x.g.clock.Now().Sub(ob.Received)
		if ob.HasTTFT && ob.OutputTokens > 1 && ob.Protocol != filter.ProtocolJSON {
			ob.TPOT = (ob.E2E - ob.TTFT) / time.Duration(ob.OutputTokens-1)
			ob.HasTPOT = true
		}
	}
	st := telemetry.AppendServerTiming(make([]byte, 0, 160), &ob)
	if ending && m.x.preemptions > 0 {
		// The client cannot see a transparent requeue or continuation;
		// the harness reads this to count preemptions per class.
		if len(st) > 0 {
			st = append(st, ", "...)
		}
		st = append(st, `preemptions;desc="`...)
		st = strconv.AppendInt(st, int64(m.x.preemptions), 10)
		st = append(st, '"')
	}
	return string(st)
}

// end finishes the observation and records it. It runs once per request,
// after the lease was released.
func (m *meter) end(x *exchange) {
	cause := m.err
	if cause == nil && x.outcome == scheduler.Cancelled {
		cause = errClientGone
	}
	if cause == nil && x.termErr != nil && m.o.Observation().HTTPStatus == 0 {
		cause = x.termErr
	}
	m.o.Finish(x.g.clock.Now(), cause)
	ob := m.o.Observation()
	filter.PutObserver(m.o)
	m.o = nil
	x.g.record(Record{
		Observation: ob,
		Class:       x.class,
		Model:       x.meta.Model,
		Pool:        x.pool.Name,
		Outcome:     x.outcome,
		Preemptions: x.preemptions,
		Err:         x.termErr,
		Passthrough: x.passthrough,
		Endpoint:    x.endpoint,
	})
}

var errClientGone = fmt.Errorf("client cancelled: %w", context.Canceled)

// Record is what the gateway reports per request to its recorders: the
// core's Record, the same the Envoy host reports.
type Record = filter.Record

// classify picks the request's class: the classifier when configured, else
// the route's class.
func (g *Gateway) classify(r *http.Request, routeClass, model string) string {
	c := g.classifier.Load()
	if c == nil {
		return routeClass
	}
	peer, _ := netip.ParseAddrPort(r.RemoteAddr)
	return c.Classify(filter.RequestInfo{
		Path: r.URL.Path, Model: model, RouteClass: routeClass,
		Peer: peer.Addr().Unmap(), Headers: r.Header,
	}).Name
}
