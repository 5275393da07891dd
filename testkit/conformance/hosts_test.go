package conformance

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/exchange"
	"github.com/llmesh/llmesh/exchange/relocate"
	"github.com/llmesh/llmesh/gateway"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/server"
	"github.com/llmesh/llmesh/testkit/wait"
)

// meshJSON is the one mesh config both hosts run: the OpenAI pool "sim"
// and the gRPC pool "sim-grpc" (capacity 1 each, preemptive), the pool
// "sim-guard" whose engine gets the class priority in the body, the pool
// "sim-picked" that honours a pick made upstream (accept_upstream_pick), three
// classes, tenant and trusted-header classification, and relocation of
// prompts from a header (HTTP) or metadata (llm.v1) into the body.
//
// No peer is trusted (192.0.2.0/24 is TEST-NET-1): a client picks its class
// by header only with the trusted marker, so requests without it meet the
// engine-priority guard.
const meshJSON = `{
  "listeners": [{"name": "main", "address": "127.0.0.1:0", "routes": [
    {"name": "grpc", "match": {"path_prefix": "/llm.v1."}, "pool": "sim-grpc"},
    {"name": "vllm", "match": {"path_prefix": "/vllm."}, "pool": "sim-grpc"},
    {"name": "guard", "match": {"path_prefix": "/v1/", "headers": {"x-lane": "guard"}}, "pool": "sim-guard"},
    {"name": "picked", "match": {"path_prefix": "/v1/", "headers": {"x-lane": "picked"}}, "pool": "sim-picked"},
    {"name": "openai", "match": {"path_prefix": "/"}, "pool": "sim"}]}],
  "pools": [
    {"name": "sim", "protocol": "openai", "endpoints": ["HTTPADDR"], "capacity": {"max_inflight": 1},
     "scheduler": {"policy": "preemptive", "preemption": {"min_run_time": "0s"}}},
    {"name": "sim-guard", "protocol": "openai", "endpoints": ["HTTPADDR"], "engine_priority": "class",
     "capacity": {"max_inflight": 4}},
    {"name": "sim-picked", "protocol": "openai", "endpoints": ["HTTPADDR"], "accept_upstream_pick": true,
     "capacity": {"max_inflight": 4}},
    {"name": "sim-grpc", "protocol": "grpc", "endpoints": ["GRPCADDR"], "capacity": {"max_inflight": 1},
     "scheduler": {"policy": "preemptive", "preemption": {"min_run_time": "0s"}}}],
  "classes": [
    {"name": "interactive", "priority": 0, "slo": {"ttft": "20ms"}},
    {"name": "batch", "priority": 10, "preemptible": true},
    {"name": "limited", "priority": 5, "queue": {"max_length": 1}},
    {"name": "impatient", "priority": 5, "queue": {"max_wait": "30ms"}}],
  "default_class": "batch",
  "classification": {
    "tenants": {"gold": "interactive", "lim": "limited", "imp": "impatient"},
    "priority_header": {"name": "x-llmesh-class", "trusted_sources": ["192.0.2.0/24"],
                        "trusted_marker": {"header": "x-mesh-trusted", "value": "s3cret"}}},
  "relocation": {
    "http": [{"header": "x-llmesh-prompt", "threshold": 16, "max": 2048}],
    "grpc": [{"method": "/llm.v1.Generation/Generate", "metadata": "x-llmesh-prompt", "field": 2, "threshold": 16, "max": 2048}]}
}`

// request is one client request as both hosts get it.
type request struct {
	path    string
	headers []string // name, value, …
	body    []byte
	// cancelAfter > 0: the client goes away after that many response
	// body reads that returned bytes.
	cancelAfter int
	// started, when set, is closed when the first response bytes reached
	// the client.
	started chan struct{}
	// queued, when set, returns once the request waits for admission; the
	// client then goes away.
	queued func()
}

func (r request) grpc() bool {
	for i := 0; i+1 < len(r.headers); i += 2 {
		if strings.EqualFold(r.headers[i], "content-type") {
			return strings.HasPrefix(r.headers[i+1], "application/grpc")
		}
	}
	return false
}

// response is what the client saw, raw; normalize makes it comparable.
type response struct {
	Status      int
	ContentType string
	RetryAfter  string
	GRPCStatus  string
	GRPCMessage string
	Pushback    bool
	Body        []byte
	Reset       bool
	Cancelled   bool
}

// rec is one Record, as both hosts report it, reduced to what is not
// timing noise.
type rec struct {
	Class            string
	Model            string
	Protocol         string
	HTTPStatus       int
	GRPCStatus       int
	HasGRPCStatus    bool
	GRPCMessage      string
	ErrorKind        string
	Complete         bool
	OutputTokens     int
	CountedTokens    int
	PromptTokens     int
	UsageReported    bool
	TokenChunks      int
	DecodeSteps      int
	Chunks           int
	FinishReason     string
	HasTTFT          bool
	HasTPOT          bool
	Queued           bool // queue time ≥ queuedAtLeast
	EngineSeen       bool
	EnginePreempted  int
	ContentEncoding  string
	ResponseBytesPos bool
	// What the host decided, beside what it observed.
	Pool        string
	Outcome     string
	Preemptions int
	Passthrough bool
}

// queuedAtLeast tells a request that waited for a slot from one admitted at
// once; the scenarios that queue hold the slot for far longer.
const queuedAtLeast = 15 * time.Millisecond

func recOf(r *exchange.Record) rec {
	o := &r.Observation
	return rec{
		Pool: r.Pool, Outcome: r.Outcome.String(), Preemptions: r.Preemptions, Passthrough: r.Passthrough,
		Class: r.Class, Model: r.Model, Protocol: o.Protocol.String(), HTTPStatus: o.HTTPStatus,
		GRPCStatus: o.GRPCStatus, HasGRPCStatus: o.HasGRPCStatus, GRPCMessage: o.GRPCMessage,
		ErrorKind: o.ErrorKind.String(), Complete: o.Complete, OutputTokens: o.OutputTokens,
		CountedTokens: o.CountedTokens, PromptTokens: o.PromptTokens, UsageReported: o.UsageReported,
		TokenChunks: o.TokenChunks, DecodeSteps: o.DecodeSteps, Chunks: o.Chunks, FinishReason: o.FinishReason,
		HasTTFT: o.HasTTFT, HasTPOT: o.HasTPOT, Queued: o.QueueTime >= queuedAtLeast,
		EngineSeen: o.Engine.Seen, EnginePreempted: o.Engine.Preemptions, ContentEncoding: o.ContentEncoding,
		ResponseBytesPos: o.ResponseBytes > 0,
	}
}

// records collects a host's Records.
type records struct {
	mu  sync.Mutex
	got []rec
	ch  chan struct{}
}

func newRecords() *records { return &records{ch: make(chan struct{}, 1024)} }

func (r *records) add(x rec) {
	r.mu.Lock()
	r.got = append(r.got, x)
	r.mu.Unlock()
	r.ch <- struct{}{}
}

// take waits up to a second for n records (a host records when the
// stream is torn down, which may be after the client saw its end) and
// returns those that came: a host that records fewer shows as a
// difference in Records.len.
func (r *records) take(n int) []rec {
	deadline := time.NewTimer(time.Second)
	defer deadline.Stop()
wait:
	for i := 0; i < n; i++ {
		select {
		case <-r.ch:
		case <-deadline.C:
			break wait
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.got
	r.got = nil
	return out
}

// drain drops records that arrive without being waited for.
func (r *records) drain() {
	for {
		select {
		case <-r.ch:
		default:
			r.mu.Lock()
			r.got = nil
			r.mu.Unlock()
			return
		}
	}
}

// admissions counts Admit calls, so a scenario knows a request reached the
// scheduler (it is queued from then on) without sleeping.
type admissions struct {
	mu   sync.Mutex
	next scheduler.Admitter
	ch   chan struct{}
}

func newAdmissions(next scheduler.Admitter) *admissions {
	return &admissions{next: next, ch: make(chan struct{}, 1024)}
}

func (a *admissions) Admit(ctx context.Context, req scheduler.Request) (scheduler.Lease, error) {
	a.mu.Lock()
	next := a.next
	a.mu.Unlock()
	a.ch <- struct{}{}
	return next.Admit(ctx, req)
}

var _ scheduler.Admitter = (*admissions)(nil)

// wait blocks until n more requests reached Admit.
func (a *admissions) wait(t *testing.T, n int) {
	t.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	for i := 0; i < n; i++ {
		select {
		case <-a.ch:
		case <-deadline.C:
			t.Fatalf("only %d of %d requests reached the scheduler", i, n)
		}
	}
}

// stats is what both hosts' schedulers report (server.Schedulers and
// scheduler.Scheduler).
type stats interface {
	Stats() []scheduler.PoolStats
}

// waitQueued polls the scheduler until a request of class waits in it:
// reaching Admit is not yet being in the queue.
func (a *admissions) waitQueued(t *testing.T, class string) {
	t.Helper()
	a.mu.Lock()
	st, ok := a.next.(stats)
	a.mu.Unlock()
	if !ok {
		t.Fatalf("the scheduler %T reports no stats", a.next)
	}
	wait.Until(t, "a "+class+" request queued", func() bool {
		for _, p := range st.Stats() {
			if p.Queued[class] > 0 {
				return true
			}
		}
		return false
	})
}

func (a *admissions) drain() {
	for {
		select {
		case <-a.ch:
		default:
			return
		}
	}
}

// host is one of the data planes under test.
type host interface {
	name() string
	do(t *testing.T, r request) response
	recs() *records
	adm() admissionWatcher
}

// admissionWatcher tells a scenario that requests reached the host's
// scheduler.
type admissionWatcher interface {
	// wait blocks until n more requests reached Admit.
	wait(t *testing.T, n int)
	// waitQueued blocks until a request of class waits in the scheduler.
	waitQueued(t *testing.T, class string)
	// drain forgets what was not waited for.
	drain()
}

var (
	_ admissionWatcher = (*admissions)(nil)
	_ admissionWatcher = (*sdkAdmissions)(nil)
)

// upstreams are where the mesh's pools point (the sim, usually behind a
// recorder of what the engine received).
type upstreams struct {
	http, grpc string // base URLs
}

func loadMesh(t *testing.T, up upstreams) (*config.Config, string) {
	t.Helper()
	js := strings.NewReplacer("HTTPADDR", strings.TrimPrefix(up.http, "http://"),
		"GRPCADDR", strings.TrimPrefix(up.grpc, "http://")).Replace(meshJSON)
	engineAddr = strings.TrimPrefix(up.http, "http://")
	c, err := config.Load([]byte(js))
	if err != nil {
		t.Fatalf("mesh: %v", err)
	}
	return c, js
}

// gatewayHost wires the gateway as `llmesh gateway --config` does
// (cmd/llmesh/gatewayproc, buildHost): routes and pools from the mesh, the mesh's
// in-process schedulers, classifier and relocation.
type gatewayHost struct {
	url   string
	rec   *records
	count *admissions
	h1    *http.Client
	h2c   *http.Client
}

// gatewayIdleTimeout ends a stalled upstream on the gateway; Envoy's
// equivalent is its router's stream idle timeout, outside the filter.
const gatewayIdleTimeout = 300 * time.Millisecond

func startGateway(t *testing.T, up upstreams, extra ...gateway.Recorder) *gatewayHost {
	t.Helper()
	mesh, _ := loadMesh(t, up)
	gcfg, err := gateway.ConfigFromMesh(mesh, "")
	if err != nil {
		t.Fatal(err)
	}
	gcfg.StreamIdleTimeout = gatewayIdleTimeout
	ms, err := server.NewMeshScheduler(mesh, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ms.Close() })
	cls, err := exchange.NewClassifierFromConfig(mesh)
	if err != nil {
		t.Fatal(err)
	}
	rel, err := relocate.FromConfig(mesh.Relocation)
	if err != nil {
		t.Fatal(err)
	}
	h := &gatewayHost{rec: newRecords(), count: newAdmissions(ms.Set)}
	g, err := gateway.New(gcfg,
		gateway.WithAdmitter(h.count),
		gateway.WithClassifier(cls),
		gateway.WithRecorder(gateway.RecorderFunc(func(r gateway.Record) {
			h.rec.add(recOf(&r))
		})),
		gateway.WithRelocation(rel, nil),
		// A tee: the telemetry recorder's gap layout reaches the gateway.
		gateway.WithRecorder(tee(extra)))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = g.Serve(ctx, ln, time.Second)
	}()
	t.Cleanup(func() { cancel(); <-done; g.Close() })
	h.url = "http://" + ln.Addr().String()
	h.h1 = &http.Client{Timeout: 30 * time.Second}
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	h.h2c = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Protocols: &p}}
	t.Cleanup(func() { h.h1.CloseIdleConnections(); h.h2c.CloseIdleConnections() })
	return h
}

func (h *gatewayHost) name() string          { return "gateway" }
func (h *gatewayHost) recs() *records        { return h.rec }
func (h *gatewayHost) adm() admissionWatcher { return h.count }
func (h *gatewayHost) do(t *testing.T, r request) response {
	t.Helper()
	c := h.h1
	if r.grpc() {
		c = h.h2c
	}
	return send(t, c, h.url+r.path, r, nil)
}

// send posts r to url and reads the whole response as a client would.
// onBody, when set, sees each piece of the body as it arrives (the Envoy
// host feeds it to the filter).
func send(t *testing.T, c *http.Client, url string, r request, hdr http.Header) response {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(r.body))
	if err != nil {
		t.Fatal(err)
	}
	if hdr != nil {
		req.Header = hdr
	} else {
		for i := 0; i+1 < len(r.headers); i += 2 {
			req.Header.Add(r.headers[i], r.headers[i+1])
		}
	}
	if r.queued != nil {
		go func() { r.queued(); cancel() }()
	}
	// A response that ends before its first bytes still releases a scenario
	// waiting for them, so that it fails instead of hanging.
	defer releaseStarted(&r)
	res, err := c.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return response{Cancelled: true}
		}
		return response{Reset: true}
	}
	defer res.Body.Close()
	out := response{Status: res.StatusCode, ContentType: res.Header.Get("Content-Type"), RetryAfter: res.Header.Get("Retry-After")}
	buf := make([]byte, 32<<10)
	reads := 0
	for {
		n, err := res.Body.Read(buf)
		if n > 0 {
			out.Body = append(out.Body, buf[:n]...)
			reads++
			if reads == 1 {
				releaseStarted(&r)
			}
			if r.cancelAfter > 0 && reads >= r.cancelAfter {
				cancel()
				out.Cancelled = true
				break
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			out.Reset = true
			break
		}
	}
	grpcTrailers(&out, res.Header, res.Trailer)
	return out
}

func grpcTrailers(out *response, hs ...http.Header) {
	for _, h := range hs {
		if v := h.Get("Grpc-Status"); v != "" {
			out.GRPCStatus = v
			msg := h.Get("Grpc-Message")
			if m, err := url.PathUnescape(msg); err == nil {
				msg = m
			}
			out.GRPCMessage = msg
		}
		if h.Get("Grpc-Retry-Pushback-Ms") != "" {
			out.Pushback = true
		}
	}
}

// tee hands every Record to each of its recorders.
type tee []exchange.Recorder

func (t tee) Record(r exchange.Record) {
	for _, x := range t {
		x.Record(r)
	}
}

// GapBuckets is the first recorder's that has one, as a host asks its
// recorder (every gap counted, telemetry.HostRecorder).
func (t tee) GapBuckets() *exchange.GapBuckets {
	for _, x := range t {
		if gb, ok := x.(interface{ GapBuckets() *exchange.GapBuckets }); ok {
			return gb.GapBuckets()
		}
	}
	return nil
}

// releaseStarted closes r.started once, if set.
func releaseStarted(r *request) {
	if r.started != nil {
		close(r.started)
		r.started = nil
	}
}
