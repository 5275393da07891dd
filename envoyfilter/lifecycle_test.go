package envoyfilter

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/envoyproxy/envoy/contrib/golang/common/go/api"
	"go.uber.org/goleak"

	"github.com/llmesh/llmesh/api/llmv1"
	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/testkit/fakesdk"
	"github.com/llmesh/llmesh/testkit/grpcframe"
	"github.com/llmesh/llmesh/testkit/wait"
)

func TestMain(m *testing.M) {
	fakesdk.InstallCAPI()
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		if n := misuses.Load(); n != 0 {
			fmt.Fprintf(os.Stderr, "%d request lifecycle calls refused (a host bug; see the log)\n", n)
			code = max(code, 1)
		}
		os.Exit(code)
	}))
}

func grpcRequest(kv ...string) *fakesdk.HeaderMap {
	return fakesdk.RequestHeaders("POST", "/llm.v1.Generation/Generate",
		append([]string{"content-type", "application/grpc", "te", "trailers"}, kv...)...)
}

// TestSSEStreamEndToEnd drives a whole OpenAI streaming request through
// the adapter without a scheduler and checks what reaches the client, the
// dynamic metadata for access logs and the Envoy stats.
func TestSSEStreamEndToEnd(t *testing.T) {
	h := newHarness(t, `{"mesh": `+testMesh("fifo", "")+`}`, false)
	s := h.stream(fakesdk.Options{})
	wantStatus(t, "DecodeHeaders", s.DecodeHeaders(sseRequest(), false), api.Continue)
	wantStatus(t, "DecodeData", s.DecodeData([]byte(`{"model":"m","prompt":"hi","stream":true}`), true), api.Continue)
	wantStatus(t, "EncodeHeaders", s.EncodeHeaders(sseResponse(), false), api.Continue)
	var all string
	for i, c := range sseChunks {
		// Split every event across two callbacks: boundaries fall anywhere.
		mid := len(c) / 2
		wantStatus(t, "EncodeData", s.EncodeData([]byte(c[:mid]), false), api.Continue)
		wantStatus(t, "EncodeData", s.EncodeData([]byte(c[mid:]), i == len(sseChunks)-1), api.Continue)
		all += c
	}
	s.Complete()
	noViolations(t, s)
	want(t, "downstream body", string(s.Downstream()), all)
	md := s.Metadata(MetadataNamespace)
	want(t, "class", md["class"], "batch")
	want(t, "output_tokens", md["output_tokens"], 3)
	want(t, "decode_steps", md["decode_steps"], 2)
	want(t, "preempted", md["preempted"], false)
	for _, k := range []string{"ttft_ms", "tpot_ms", "queue_ms"} {
		if v, ok := md[k].(float64); !ok || v < 0 {
			t.Errorf("metadata %s = %v, want a non-negative number", k, md[k])
		}
	}
	if _, ok := md["error"]; ok {
		t.Errorf("metadata error = %v on a clean stream", md["error"])
	}
	want(t, StatRequests, h.counter(StatRequests), 1)
	want(t, StatCompleted, h.counter(StatCompleted), 1)
	want(t, StatFailed, h.counter(StatFailed), 0)
}

// TestGRPCStreamEndToEnd drives an llm.v1.Generation/Generate stream with
// the tenant header mapping it to the interactive class, through the
// in-process scheduler.
func TestGRPCStreamEndToEnd(t *testing.T) {
	h := newHarness(t, `{"mesh": `+testMesh("fifo", "")+`}`, true)
	s := h.stream(fakesdk.Options{Protocol: "HTTP/2"})
	r := s.DecodeHeaders(grpcRequest("x-tenant-id", "gold"), false)
	wantStatus(t, "DecodeHeaders", r, api.Continue)
	if !r.Async {
		t.Errorf("with a scheduler DecodeHeaders must hold (Running), got sync %+v", r)
	}
	req := grpcframe.Message(&llmv1.GenerateRequest{Model: "m", Prompt: "hi", MaxTokens: 3})
	wantStatus(t, "DecodeData", s.DecodeData(req, true), api.Continue)
	wantStatus(t, "EncodeHeaders", s.EncodeHeaders(fakesdk.ResponseHeaders(200, "content-type", "application/grpc"), false), api.Continue)
	var body []byte
	for i, text := range []string{"a", "b", "c"} {
		m := &llmv1.GenerateResponse{TokenIds: []uint32{uint32(i + 1)}, Text: text}
		if i == 2 {
			m.FinishReason = "length"
			m.Usage = &llmv1.Usage{PromptTokens: 1, CompletionTokens: 3, TotalTokens: 4}
		}
		f := grpcframe.Message(m)
		body = append(body, f...)
		wantStatus(t, "EncodeData", s.EncodeData(f, false), api.Continue)
	}
	want(t, "inflight while streaming", h.gauge(GaugeInflight), 1)
	wantStatus(t, "EncodeTrailers", s.EncodeTrailers(fakesdk.NewHeaders("grpc-status", "0")), api.Continue)
	want(t, "inflight after trailers", h.gauge(GaugeInflight), 0)
	s.Complete()
	noViolations(t, s)
	want(t, "downstream", string(s.Downstream()), string(body))
	md := s.Metadata(MetadataNamespace)
	want(t, "class", md["class"], "interactive")
	want(t, "output_tokens", md["output_tokens"], 3)
	want(t, "decode_steps", md["decode_steps"], 2)
	want(t, StatAdmitted, h.counter(StatAdmitted), 1)
	want(t, StatCompleted, h.counter(StatCompleted), 1)
	want(t, "queued", h.gauge(GaugeQueued), 0)
}

// TestQueueHoldAndRelease: with capacity 1 a second request is held in
// DecodeHeaders until the first one's stream completes.
func TestQueueHoldAndRelease(t *testing.T) {
	h := newHarness(t, `{"mesh": `+testMesh("fifo", "")+`}`, true)
	a := h.stream(fakesdk.Options{})
	wantStatus(t, "A DecodeHeaders", a.DecodeHeaders(sseRequest(), true), api.Continue)
	b := h.stream(fakesdk.Options{})
	pb := b.StartDecodeHeaders(sseRequest(), true)
	want(t, "queued", h.gauge(GaugeQueued), 1)
	want(t, "inflight", h.gauge(GaugeInflight), 1)
	if pb.Ready() {
		t.Fatal("B was continued while A holds the only slot")
	}
	// A streams to the end; its completion frees the slot.
	wantStatus(t, "A EncodeHeaders", a.EncodeHeaders(sseResponse(), false), api.Continue)
	for i, c := range sseChunks {
		a.EncodeData([]byte(c), i == len(sseChunks)-1)
	}
	rb := pb.Wait()
	wantStatus(t, "B DecodeHeaders", rb, api.Continue)
	a.Complete()
	want(t, "inflight", h.gauge(GaugeInflight), 1)
	want(t, "queued", h.gauge(GaugeQueued), 0)
	// B never gets a response: Envoy ends the stream (for example an
	// upstream reset); the lease is released as failed.
	b.Complete()
	want(t, "inflight", h.gauge(GaugeInflight), 0)
	md := b.Metadata(MetadataNamespace)
	if md["error"] == nil {
		t.Errorf("B ended without a response but metadata has no error: %v", md)
	}
	if q, _ := md["queue_ms"].(float64); q <= 0 {
		t.Errorf("B queue_ms = %v, want > 0 (it waited for A)", md["queue_ms"])
	}
	noViolations(t, a)
	noViolations(t, b)
	want(t, StatAdmitted, h.counter(StatAdmitted), 2)
}

// TestCancelWhileQueued: the client goes away while the request is held;
// OnDestroy cancels the admission, nothing calls back into the destroyed
// stream, and the queue slot does not leak.
func TestCancelWhileQueued(t *testing.T) {
	h := newHarness(t, `{"mesh": `+testMesh("fifo", "")+`}`, true)
	a := h.stream(fakesdk.Options{})
	wantStatus(t, "A", a.DecodeHeaders(sseRequest(), true), api.Continue)
	b := h.stream(fakesdk.Options{})
	pb := b.StartDecodeHeaders(sseRequest(), true)
	b.Destroy(api.Terminate)
	if r := pb.Wait(); !r.Destroyed {
		t.Fatalf("B: %+v, want Destroyed", r)
	}
	wait.Until(t, "cancelled_queued counted", func() bool { return h.counter(StatCancelledQueued) == 1 })
	wait.Until(t, "queue gauge back to 0", func() bool { return h.gauge(GaugeQueued) == 0 })
	// A's end frees the slot for C at once: B is no longer queued.
	a.Destroy(api.Terminate)
	want(t, "inflight", h.gauge(GaugeInflight), 0)
	c := h.stream(fakesdk.Options{})
	wantStatus(t, "C", c.DecodeHeaders(sseRequest(), true), api.Continue)
	c.Complete()
	noViolations(t, a)
	noViolations(t, b)
	noViolations(t, c)
	want(t, "inflight", h.gauge(GaugeInflight), 0)
}

// TestServerTiming: with telemetry.server_timing the queue time goes out
// in the response headers and the full timing in gRPC trailers.
func TestServerTiming(t *testing.T) {
	h := newHarness(t, `{"mesh": `+testMesh("fifo", `, "telemetry": {"server_timing": true}`)+`}`, true)
	s := h.stream(fakesdk.Options{})
	wantStatus(t, "DecodeHeaders", s.DecodeHeaders(grpcRequest(), true), api.Continue)
	rh := fakesdk.ResponseHeaders(200, "content-type", "application/grpc")
	wantStatus(t, "EncodeHeaders", s.EncodeHeaders(rh, false), api.Continue)
	if v := rh.Peek("server-timing"); !strings.HasPrefix(v, "queue;dur=") {
		t.Errorf("response server-timing = %q, want the queue time", v)
	}
	s.EncodeData(grpcframe.Message(&llmv1.GenerateResponse{TokenIds: []uint32{1, 2}}), false)
	s.EncodeData(grpcframe.Message(&llmv1.GenerateResponse{TokenIds: []uint32{3}, FinishReason: "length"}), false)
	tr := fakesdk.NewHeaders("grpc-status", "0")
	wantStatus(t, "EncodeTrailers", s.EncodeTrailers(tr), api.Continue)
	if v := tr.Peek("server-timing"); !strings.Contains(v, "ttft;dur=") || !strings.Contains(v, "tpot;dur=") {
		t.Errorf("trailer server-timing = %q, want ttft and tpot", v)
	}
	s.Complete()
	noViolations(t, s)
}

// TestResetMidStreamWhoEnded: a stream reset after the response started is
// a client cancel when Envoy flags it DC (downstream connection
// termination: an HTTP/1.1 client closed) or DR (downstream remote reset:
// an HTTP/2 client reset its stream), and an upstream reset otherwise (UR,
// or a host that does not answer response.flags).
func TestResetMidStreamWhoEnded(t *testing.T) {
	for _, tc := range []struct {
		flags string // "" leaves the attribute unanswered
		want  string
	}{
		{"16384", "cancelled"},
		{"268435456", "cancelled"},
		{"268435472", "cancelled"}, // DR with UR: the router reset the upstream after the client left
		{"16", "upstream_reset"},
		{"", "upstream_reset"},
	} {
		h := newHarness(t, `{"mesh": `+testMesh("fifo", "")+`}`, false)
		props := map[string]string{}
		s := h.stream(fakesdk.Options{Properties: props})
		wantStatus(t, "DecodeHeaders", s.DecodeHeaders(sseRequest(), false), api.Continue)
		wantStatus(t, "DecodeData", s.DecodeData([]byte(`{"model":"m","prompt":"hi","stream":true}`), true), api.Continue)
		wantStatus(t, "EncodeHeaders", s.EncodeHeaders(sseResponse(), false), api.Continue)
		wantStatus(t, "EncodeData", s.EncodeData([]byte(sseChunks[0]), false), api.Continue)
		if tc.flags != "" {
			props["response.flags"] = tc.flags
		}
		s.Filter().OnStreamComplete()
		s.Destroy(api.Terminate)
		noViolations(t, s)
		want(t, "flags "+tc.flags+": metadata error", s.Metadata(MetadataNamespace)["error"], tc.want)
	}
}

// gateAdmitter admits once gate is closed, with a lease that counts its
// releases.
type gateAdmitter struct {
	gate     chan struct{}
	released chan scheduler.Outcome
}

func (g *gateAdmitter) Admit(ctx context.Context, req scheduler.Request) (scheduler.Lease, error) {
	select {
	case <-g.gate:
		return &countLease{released: g.released}, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: %w", scheduler.ErrCancelled, ctx.Err())
	}
}

type countLease struct{ released chan scheduler.Outcome }

func (l *countLease) Preempt() <-chan struct{}    { return nil }
func (l *countLease) Progress(scheduler.Progress) {}
func (l *countLease) Release(o scheduler.Outcome) { l.released <- o }
func (l *countLease) QueueTime() time.Duration    { return 0 }

// TestAdmittedAfterStreamComplete: Envoy may answer a held stream itself
// (the buffer limit's 413, prepared while the filter's DecodeData started
// admission, runs through the filter's encode half) and complete it while
// the admission goroutine still waits. An admission that lands after that
// response began or ended, or after OnStreamComplete, was never used: it
// is released once, as cancelled, and leaves the in-flight gauge at zero.
func TestAdmittedAfterStreamComplete(t *testing.T) {
	for _, tc := range []struct {
		name string
		// before runs while the admission waits; after once it landed.
		before, after func(s *fakesdk.Stream)
		outcome       scheduler.Outcome
	}{
		{name: "after the response ended",
			before: func(s *fakesdk.Stream) {
				s.EncodeHeaders(fakesdk.ResponseHeaders(413, "content-type", "text/plain"), false)
				s.EncodeData([]byte("Payload Too Large"), true)
			},
			after:   func(s *fakesdk.Stream) { s.Complete() },
			outcome: scheduler.Cancelled},
		{name: "while Envoy's own response streams",
			before: func(s *fakesdk.Stream) {
				s.EncodeHeaders(fakesdk.ResponseHeaders(413, "content-type", "text/plain"), false)
			},
			after: func(s *fakesdk.Stream) {
				s.EncodeData([]byte("Payload Too Large"), true)
				s.Complete()
			},
			outcome: scheduler.Cancelled},
		{name: "after OnStreamComplete",
			before:  func(s *fakesdk.Stream) { s.Filter().OnStreamComplete() },
			after:   func(s *fakesdk.Stream) { s.Destroy(api.Terminate) },
			outcome: scheduler.Cancelled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := &gateAdmitter{gate: make(chan struct{}), released: make(chan scheduler.Outcome, 2)}
			h := newHarness(t, `{"mesh": `+testMesh("fifo", "")+`}`, false, func(e *Env) {
				e.NewAdmitter = func(*config.Config) (scheduler.Admitter, error) { return g, nil }
			})
			s := h.stream(fakesdk.Options{})
			p := s.StartDecodeHeaders(sseRequest(), true)
			tc.before(s)
			close(g.gate)
			if r := p.Wait(); r.Status != api.Continue {
				t.Fatalf("held DecodeHeaders ended %+v, want Continue", r)
			}
			tc.after(s)
			select {
			case o := <-g.released:
				want(t, "outcome", o, tc.outcome)
			case <-time.After(5 * time.Second):
				t.Fatal("the admission was never released")
			}
			select {
			case o := <-g.released:
				t.Errorf("released twice (again %v)", o)
			default:
			}
			want(t, "inflight", h.gauge(GaugeInflight), 0)
			noViolations(t, s)
		})
	}
}
