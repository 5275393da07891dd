package exchange

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/llmesh/llmesh/api/llmv1"
	"github.com/llmesh/llmesh/api/vllmpb"
	"github.com/llmesh/llmesh/testkit/grpcframe"
)

// feedGRPC runs frames (one piece each, 10 ms apart from 100 ms) and the
// trailers through a fresh observer.
func feedGRPC(t *testing.T, opts Options, trailers MapHeaders, pieces ...[]byte) (Observation, []error) {
	t.Helper()
	o := NewObserver(opts)
	o.MarkReceived(at(0))
	o.MarkUpstreamSent(at(5))
	o.ResponseHeaders(at(50), 200, MapHeaders{"content-type": "application/grpc"})
	var errs []error
	for i, p := range pieces {
		if err := o.Observe(at(100+10*i), p); err != nil {
			errs = append(errs, err)
		}
	}
	end := at(100 + 10*len(pieces))
	o.Trailers(end, trailers)
	o.Finish(end, nil)
	return o.Observation(), errs
}

func llmV1Stream(t testing.TB) [][]byte {
	return [][]byte{
		grpcframe.Message(&llmv1.GenerateResponse{TokenIds: []uint32{11}, Text: "He"}),
		grpcframe.Message(&llmv1.GenerateResponse{TokenIds: []uint32{12, 13}, Text: "llo!"}),
		grpcframe.Message(&llmv1.GenerateResponse{}), // no tokens
		grpcframe.Message(&llmv1.GenerateResponse{TokenIds: []uint32{14}, Text: " ok", FinishReason: "stop",
			Usage: &llmv1.Usage{PromptTokens: 9, CompletionTokens: 4, TotalTokens: 13}}),
	}
}

func TestObserveGRPCLLMV1(t *testing.T) {
	trailers := MapHeaders{
		"grpc-status": "0", "llmesh-engine-arrival-ns": "1700000000010000000",
		"llmesh-engine-first-token-ns": "1700000000090000000", "llmesh-engine-preemptions": "2",
	}
	got, errs := feedGRPC(t, Options{GRPCMethod: MethodLLMV1, KeepOutput: true}, trailers, llmV1Stream(t)...)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if !got.OK() || !got.Complete || got.TokenChunks != 3 || got.CountedTokens != 4 || got.OutputTokens != 4 ||
		got.PromptTokens != 9 || got.FinishReason != "stop" || got.Chunks != 4 {
		t.Errorf("got %+v", got)
	}
	if got.TTFT != 100*time.Millisecond || got.UpstreamTTFT != 95*time.Millisecond || got.E2E != 140*time.Millisecond ||
		got.TPOT != 40*time.Millisecond/3 || got.ITL.Max != 20*time.Millisecond {
		t.Errorf("timings ttft %v up %v e2e %v tpot %v itl %+v", got.TTFT, got.UpstreamTTFT, got.E2E, got.TPOT, got.ITL)
	}
	if got.Text != "Hello! ok" || len(got.TokenIDs) != 4 || got.TokenIDs[3] != 14 {
		t.Errorf("output %q %v", got.Text, got.TokenIDs)
	}
	if !got.Engine.Seen || got.Engine.Arrival != time.Unix(0, 1700000000010000000) || got.Engine.Preemptions != 2 {
		t.Errorf("engine %+v", got.Engine)
	}
}

func TestObserveGRPCVLLM(t *testing.T) {
	chunk := func(ids ...uint32) []byte {
		return grpcframe.Message(&vllmpb.GenerateResponse{Response: &vllmpb.GenerateResponse_Chunk{Chunk: &vllmpb.GenerateStreamChunk{
			TokenIds: ids, PromptTokens: 5, CompletionTokens: uint32(len(ids))}}})
	}
	complete := grpcframe.Message(&vllmpb.GenerateResponse{Response: &vllmpb.GenerateResponse_Complete{Complete: &vllmpb.GenerateComplete{
		OutputIds: []uint32{1, 2, 3}, FinishReason: "length", PromptTokens: 5, CompletionTokens: 3}}})
	got, errs := feedGRPC(t, Options{GRPCMethod: MethodVLLM}, MapHeaders{"grpc-status": "0"}, chunk(1), chunk(2, 3), complete)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if !got.OK() || got.TokenChunks != 2 || got.OutputTokens != 3 || got.PromptTokens != 5 || got.FinishReason != "length" {
		t.Errorf("streamed: %+v", got)
	}
	// Non-streaming: only the complete message, which then is the first token.
	got, _ = feedGRPC(t, Options{GRPCMethod: MethodVLLM}, MapHeaders{"grpc-status": "0"}, complete)
	if !got.OK() || got.TokenChunks != 1 || got.CountedTokens != 3 || got.OutputTokens != 3 || got.FirstToken != at(100) {
		t.Errorf("unary: %+v", got)
	}
}

func TestObserveGRPCCompressedAndUnknown(t *testing.T) {
	got, errs := feedGRPC(t, Options{GRPCMethod: MethodLLMV1}, MapHeaders{"grpc-status": "0"},
		grpcframe.Raw(1, []byte("\x1f\x8b not really gzip")), grpcframe.Raw(1, nil))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if got.CompressedFrames != 2 || got.TokenChunks != 2 || !got.OK() {
		t.Errorf("compressed: %+v", got)
	}
	got, _ = feedGRPC(t, Options{GRPCMethod: "/other.Svc/Stream"}, MapHeaders{"grpc-status": "0"},
		grpcframe.Raw(0, []byte{0x08, 0x01}), grpcframe.Raw(0, nil), grpcframe.Raw(0, []byte{0x08, 0x02}))
	if got.TokenChunks != 2 || got.Chunks != 3 {
		t.Errorf("unknown API: %+v", got)
	}
}

func TestObserveGRPCErrors(t *testing.T) {
	huge := make([]byte, 5)
	binary.BigEndian.PutUint32(huge[1:], 0xFFFFFFF0)
	tests := []struct {
		name     string
		opts     Options
		trailers MapHeaders
		pieces   [][]byte
		wantErr  error
		wantKind ErrorKind
		wantMsg  string
	}{
		{"status", Options{}, MapHeaders{"grpc-status": "8", "grpc-message": "queue%20full"}, nil, nil, ErrorGRPCStatus, "grpc-status 8: queue full"},
		{"no trailers", Options{}, nil, [][]byte{grpcframe.Message(&llmv1.GenerateResponse{Text: "x"})}, nil, ErrorTruncated, "without trailers"},
		{"lying length", Options{}, nil, [][]byte{append(huge, "abc"...)}, ErrFrameTooLarge, ErrorFrameTooLarge, "declared length 4294967280 exceeds max_frame_bytes 4194304"},
		{"custom cap", Options{MaxFrameBytes: 3}, nil, [][]byte{grpcframe.Raw(0, []byte("abcd"))}, ErrFrameTooLarge, ErrorFrameTooLarge, "max_frame_bytes 3"},
		{"bad flag", Options{}, nil, [][]byte{grpcframe.Raw(0x80, []byte("abcd"))}, ErrMalformed, ErrorMalformed, "flag 0x80"},
		{"bad protobuf", Options{GRPCMethod: MethodLLMV1}, MapHeaders{"grpc-status": "0"}, [][]byte{grpcframe.Raw(0, []byte{0x0a, 0x09, 0x01})}, ErrMalformed, ErrorMalformed, "invalid protobuf"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, errs := feedGRPC(t, tc.opts, tc.trailers, tc.pieces...)
			if tc.wantErr != nil && (len(errs) != 1 || !errors.Is(errs[0], tc.wantErr)) {
				t.Errorf("errors %v, want one %v", errs, tc.wantErr)
			}
			if got.ErrorKind != tc.wantKind || !strings.Contains(got.Error, tc.wantMsg) {
				t.Errorf("error = %v %q, want %v containing %q", got.ErrorKind, got.Error, tc.wantKind, tc.wantMsg)
			}
		})
	}
}

func TestObserveGRPCTrailersOnly(t *testing.T) {
	o := NewObserver(Options{})
	o.ResponseHeaders(at(1), 200, MapHeaders{"content-type": "application/grpc", "grpc-status": "14", "grpc-message": "engine down"})
	o.Finish(at(2), nil)
	got := o.Observation()
	if got.ErrorKind != ErrorGRPCStatus || got.GRPCStatus != 14 || got.GRPCMessage != "engine down" || !got.HasGRPCStatus {
		t.Errorf("got %+v", got)
	}
}
