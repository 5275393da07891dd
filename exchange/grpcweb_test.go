package exchange

import (
	"encoding/base64"
	"testing"

	"github.com/llmesh/llmesh/testkit/grpcframe"
)

// observeWeb runs one response of content type ct through a fresh
// observer, each piece a chunk, without HTTP trailers (gRPC-Web has none).
func observeWeb(t *testing.T, ct string, pieces ...[]byte) Observation {
	t.Helper()
	o := NewObserver(Options{GRPCMethod: MethodLLMV1})
	o.MarkReceived(at(0))
	o.ResponseHeaders(at(50), 200, MapHeaders{"content-type": ct})
	for i, p := range pieces {
		_ = o.Observe(at(100+10*i), p)
	}
	o.Finish(at(200), nil)
	return o.Observation()
}

// TestObserveGRPCWeb: binary gRPC-Web is read as gRPC, its status from the
// trailer frame (flag 0x80) in the body; that frame is not a message.
func TestObserveGRPCWeb(t *testing.T) {
	msgs := llmV1Stream(t)
	ok := grpcframe.Raw(0x80, []byte("grpc-status: 0\r\nGrpc-Message: \r\nllmesh-engine-preemptions: 1\r\n"))
	got := observeWeb(t, "application/grpc-web+proto", append(msgs, ok)...)
	if got.Protocol != ProtocolGRPC || !got.OK() || !got.Complete || !got.HasGRPCStatus || got.GRPCStatus != 0 ||
		got.Chunks != 4 || got.OutputTokens != 4 || got.Engine.Preemptions != 1 {
		t.Errorf("ok stream: %+v", got)
	}
	// The trailer frame split across chunks, with an error status.
	bad := grpcframe.Raw(0x80, []byte("grpc-status: 8\r\ngrpc-message: too%20big\r\n"))
	got = observeWeb(t, "application/grpc-web", msgs[0], bad[:7], bad[7:])
	if got.OK() || got.ErrorKind != ErrorGRPCStatus || got.GRPCStatus != 8 || got.GRPCMessage != "too big" || !got.Complete {
		t.Errorf("error status: %+v", got)
	}
	// Without the trailer frame the stream is truncated.
	got = observeWeb(t, "application/grpc-web", msgs...)
	if got.ErrorKind != ErrorTruncated {
		t.Errorf("no trailer frame: %+v", got)
	}
	// In plain gRPC a 0x80 flag is malformed.
	got = observeWeb(t, "application/grpc", msgs[0], ok)
	if got.ErrorKind != ErrorMalformed {
		t.Errorf("0x80 in plain gRPC: kind %v, want malformed", got.ErrorKind)
	}
}

// TestObserveGRPCWebText: base64 gRPC-Web is not decoded: counted as raw.
func TestObserveGRPCWebText(t *testing.T) {
	var body []byte
	for _, m := range llmV1Stream(t) {
		body = append(body, m...)
	}
	enc := []byte(base64.StdEncoding.EncodeToString(body))
	got := observeWeb(t, "application/grpc-web-text+proto", enc)
	if got.Protocol != ProtocolRaw || !got.OK() || got.ResponseBytes != int64(len(enc)) || got.Chunks != 0 {
		t.Errorf("grpc-web-text: %+v", got)
	}
}

func FuzzWebTrailers(f *testing.F) {
	f.Add([]byte("grpc-status: 0\r\ngrpc-message: a\r\n"))
	f.Add([]byte("x\n:\n: y\r\nGRPC-STATUS:12"))
	f.Fuzz(func(t *testing.T, b []byte) {
		h := webTrailers(b)
		for k := range h {
			if k != lower(k) {
				t.Fatalf("name %q not lower-cased", k)
			}
		}
		o := NewObserver(Options{})
		o.ResponseHeaders(at(0), 200, MapHeaders{"content-type": "application/grpc-web"})
		_ = o.Observe(at(1), grpcframe.Raw(0x80, b))
		o.Finish(at(2), nil)
	})
}

func lower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}
