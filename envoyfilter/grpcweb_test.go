package envoyfilter

import (
	"encoding/base64"
	"sync"
	"testing"

	"github.com/envoyproxy/envoy/contrib/golang/common/go/api"
	"google.golang.org/protobuf/proto"

	"github.com/llmesh/llmesh/api/llmv1"
	"github.com/llmesh/llmesh/exchange"
	"github.com/llmesh/llmesh/testkit/fakesdk"
	"github.com/llmesh/llmesh/testkit/grpcframe"
)

func webMessage(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return grpcframe.Raw(0, b)
}

// recordsOf is a recorder for the Envoy host's Records.
type recordsOf struct {
	mu  sync.Mutex
	got []exchange.Record
}

func (r *recordsOf) Record(rec exchange.Record) {
	r.mu.Lock()
	r.got = append(r.got, rec)
	r.mu.Unlock()
}

// TestGRPCWebResponses: a gRPC-Web call the Envoy host sees untranslated
// (no grpc_web filter in front) is observed as gRPC, its status read from
// the trailer frame in the body; gRPC-Web-text is counted, not parsed.
func TestGRPCWebResponses(t *testing.T) {
	recs := &recordsOf{}
	h := newHarness(t, `{"mesh": `+testMesh("fifo", "")+`}`, false, func(e *Env) { e.Recorder = recs })
	req := webMessage(t, &llmv1.GenerateRequest{Model: "m", Prompt: "hi", MaxTokens: 2})
	resp := append(webMessage(t, &llmv1.GenerateResponse{TokenIds: []uint32{1}, Text: "a"}),
		webMessage(t, &llmv1.GenerateResponse{TokenIds: []uint32{2}, Text: "b", FinishReason: "length",
			Usage: &llmv1.Usage{PromptTokens: 1, CompletionTokens: 2, TotalTokens: 3}})...)
	trailer := grpcframe.Raw(0x80, []byte("grpc-status: 0\r\ngrpc-message: \r\n"))
	for _, tc := range []struct {
		ct        string
		body      [][]byte
		protocol  exchange.Protocol
		tokens    int
		hasStatus bool
		model     string // the model read from the request
	}{
		{"application/grpc-web+proto", [][]byte{resp, trailer}, exchange.ProtocolGRPC, 2, true, "m"},
		{"application/grpc-web", [][]byte{resp[:9], append(resp[9:], trailer...)}, exchange.ProtocolGRPC, 2, true, "m"},
		{"application/grpc-web-text", [][]byte{[]byte(base64.StdEncoding.EncodeToString(append(resp, trailer...)))},
			exchange.ProtocolRaw, 0, false, ""},
	} {
		t.Run(tc.ct, func(t *testing.T) {
			recs.mu.Lock()
			recs.got = nil
			recs.mu.Unlock()
			s := h.stream(fakesdk.Options{})
			wantStatus(t, "DecodeHeaders", s.DecodeHeaders(fakesdk.RequestHeaders("POST", exchange.MethodLLMV1,
				"content-type", tc.ct), false), api.Continue)
			body := req
			if tc.model == "" {
				body = []byte(base64.StdEncoding.EncodeToString(req))
			}
			wantStatus(t, "DecodeData", s.DecodeData(body, true), api.Continue)
			wantStatus(t, "EncodeHeaders", s.EncodeHeaders(fakesdk.ResponseHeaders(200, "content-type", tc.ct), false), api.Continue)
			for i, b := range tc.body {
				wantStatus(t, "EncodeData", s.EncodeData(b, i == len(tc.body)-1), api.Continue)
			}
			s.Complete()
			s.Destroy(api.Normal)
			noViolations(t, s)
			recs.mu.Lock()
			defer recs.mu.Unlock()
			if len(recs.got) != 1 {
				t.Fatalf("%d records, want 1", len(recs.got))
			}
			r := recs.got[0]
			if r.Protocol != tc.protocol || !r.OK() || !r.Complete || r.OutputTokens != tc.tokens || r.HasGRPCStatus != tc.hasStatus ||
				r.GRPCStatus != 0 || r.Model != tc.model {
				t.Errorf("record: protocol %v ok %v (%v %q) complete %v tokens %d grpc status %v/%d model %q",
					r.Protocol, r.OK(), r.ErrorKind, r.Error, r.Complete, r.OutputTokens, r.HasGRPCStatus, r.GRPCStatus, r.Model)
			}
		})
	}
}
