package envoyfilter

import (
	"testing"

	"github.com/envoyproxy/envoy/contrib/golang/common/go/api"

	"github.com/llmesh/llmesh/api/llmv1"
	"github.com/llmesh/llmesh/testkit/fakesdk"
	"github.com/llmesh/llmesh/testkit/grpcframe"
	"github.com/llmesh/llmesh/testkit/wait"
)

// TestPreemptionMidStream: a batch request is streaming when an
// interactive one arrives at a full pool under the preemptive policy. The
// batch stream is stopped at its next callback with a retryable local reply
// (which Envoy turns into a reset, since headers went out), and the
// interactive request is admitted.
func TestPreemptionMidStream(t *testing.T) {
	for _, tc := range []struct {
		name     string
		grpc     bool
		wantCode int
		wantGRPC int64
		header   string
		value    string
	}{
		{name: "openai", wantCode: 503, wantGRPC: -1, header: "retry-after", value: "2"},
		{name: "grpc", grpc: true, wantCode: 503, wantGRPC: 14, header: "grpc-retry-pushback-ms", value: "2000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, `{"mesh": `+testMesh("preemptive", "")+`, "retry_after": "2s"}`, true)
			low := h.stream(fakesdk.Options{})
			reqH, respH, chunk := sseRequest(), sseResponse(), []byte(sseChunks[0])
			if tc.grpc {
				reqH = grpcRequest()
				respH = fakesdk.ResponseHeaders(200, "content-type", "application/grpc")
				chunk = grpcframe.Message(&llmv1.GenerateResponse{TokenIds: []uint32{7}, Text: "x"})
			}
			wantStatus(t, "low DecodeHeaders", low.DecodeHeaders(reqH, true), api.Continue)
			wantStatus(t, "low EncodeHeaders", low.EncodeHeaders(respH, false), api.Continue)
			wantStatus(t, "low first chunk", low.EncodeData(chunk, false), api.Continue)

			high := h.stream(fakesdk.Options{})
			hp := high.StartDecodeHeaders(sseRequest("x-tenant-id", "gold"), true)
			// The scheduler preempts once the interactive TTFT (20ms) is at
			// risk; the batch stream notices at its next chunk.
			var r fakesdk.Result
			wait.Until(t, "the low stream preempted", func() bool {
				r = low.EncodeData(chunk, false)
				return r.Status != api.Continue
			})
			wantStatus(t, "low after preemption", r, api.LocalReply)
			rep := low.Reply()
			want(t, "reply code", rep.Code, tc.wantCode)
			want(t, "reply grpc status", rep.GRPCStatus, tc.wantGRPC)
			want(t, "reply "+tc.header, rep.Headers[tc.header], []string{tc.value})
			if !rep.Reset {
				t.Error("a local reply after response headers must be marked as a stream reset")
			}
			wantStatus(t, "high admitted", hp.Wait(), api.Continue)
			low.Complete()
			md := low.Metadata(MetadataNamespace)
			want(t, "low preempted", md["preempted"], true)
			want(t, "low error", md["error"], "preempted")
			want(t, StatPreempted, h.counter(StatPreempted), 1)
			high.Complete()
			want(t, "inflight", h.gauge(GaugeInflight), 0)
			noViolations(t, low)
			noViolations(t, high)
		})
	}
}

// TestPreemptionBeforeResponse: a batch request still sending its body is
// preempted before the upstream answered. It is stopped at its next body
// chunk with the retryable reply, not a reset (no response went out), and
// the slot goes to the interactive request without waiting for the
// upstream (testkit/envoyhost's preempt_before_response runs the same
// through the real SDK, where the reply also passes EncodeHeaders).
func TestPreemptionBeforeResponse(t *testing.T) {
	for _, tc := range []struct {
		name     string
		grpc     bool
		wantGRPC int64
		header   string
		value    string
	}{
		{name: "openai", wantGRPC: -1, header: "retry-after", value: "2"},
		{name: "grpc", grpc: true, wantGRPC: 14, header: "grpc-retry-pushback-ms", value: "2000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, `{"mesh": `+testMesh("preemptive", "")+`, "retry_after": "2s"}`, true)
			low := h.stream(fakesdk.Options{})
			reqH, chunk := sseRequest(), []byte(`{"prompt": `)
			if tc.grpc {
				reqH = grpcRequest()
				chunk = grpcframe.Message(&llmv1.GenerateRequest{Model: "m"})
			}
			wantStatus(t, "low DecodeHeaders", low.DecodeHeaders(reqH, false), api.Continue)
			wantStatus(t, "low first chunk", low.DecodeData(chunk, false), api.Continue)

			high := h.stream(fakesdk.Options{})
			hp := high.StartDecodeHeaders(sseRequest("x-tenant-id", "gold"), true)
			var r fakesdk.Result
			wait.Until(t, "the low stream preempted", func() bool {
				r = low.DecodeData(chunk, false)
				return r.Status != api.Continue
			})
			wantStatus(t, "low after preemption", r, api.LocalReply)
			rep := low.Reply()
			want(t, "reply code", rep.Code, 503)
			want(t, "reply grpc status", rep.GRPCStatus, tc.wantGRPC)
			want(t, "reply "+tc.header, rep.Headers[tc.header], []string{tc.value})
			if rep.Reset {
				t.Error("a local reply before response headers is not a stream reset")
			}
			wantStatus(t, "high admitted", hp.Wait(), api.Continue)
			low.Complete()
			md := low.Metadata(MetadataNamespace)
			want(t, "low preempted", md["preempted"], true)
			want(t, StatPreempted, h.counter(StatPreempted), 1)
			high.Complete()
			want(t, "inflight", h.gauge(GaugeInflight), 0)
			noViolations(t, low)
			noViolations(t, high)
		})
	}
}
