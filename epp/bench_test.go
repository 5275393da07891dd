//go:build linux

package epp_test

import (
	"context"
	"io"
	"testing"

	"github.com/llmesh/llmesh/epp/epptest"
	"github.com/llmesh/llmesh/testkit/cputime"
)

// BenchmarkDecision measures the picker's cost through a real grpc-go
// ext_proc client on loopback, in full duplex mode as the inference
// extension's gateways drive it:
//
//   - request: one whole ext_proc stream per op (request headers and
//     body, the pick, the body streamed back, response headers, one SSE
//     chunk with the end of the stream, the stream's end);
//   - chunk: one response body chunk per op (an SSE event relayed through
//     the picker and streamed back) on one long response.
//
// allocs/op and B/op are the whole process's (client included), as is
// cpu-ns/op.
func BenchmarkDecision(b *testing.B) {
	b.Run("request", func(b *testing.B) {
		p := startPicker(b, nil)
		d := p.driver(epptest.FullDuplex)
		events := []byte(sse(1))
		resp := epptest.Response{Status: 200, Headers: map[string]string{"content-type": "text/event-stream"},
			Chunks: [][]byte{events}}
		ctx := context.Background()
		b.ReportAllocs()
		// The process's CPU counts both ends of the loopback gRPC
		// connection: it bounds the picker's own cost from above.
		cputime.ReportProcess(b)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			call, pick, err := d.Start(ctx, chat(nil))
			if err != nil || pick.Immediate != nil {
				b.Fatalf("%v %v", err, pick.Immediate)
			}
			if _, err := call.Respond(resp); err != nil {
				b.Fatal(err)
			}
			<-p.done
		}
	})
	b.Run("chunk", func(b *testing.B) {
		p := startPicker(b, nil)
		call, pick, err := p.driver(epptest.FullDuplex).Start(context.Background(), chat(nil))
		if err != nil || pick.Immediate != nil {
			b.Fatalf("%v %v", err, pick.Immediate)
		}
		body := &eventBody{n: b.N, event: []byte(`data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"t"}}]}` + "\n\n")}
		b.ReportAllocs()
		cputime.ReportProcess(b)
		b.ResetTimer()
		rep, err := call.Relay(epptest.Response{Status: 200, Headers: map[string]string{"content-type": "text/event-stream"}, Body: body})
		b.StopTimer()
		if err != nil || rep.Immediate != nil || rep.EndedByPicker {
			b.Fatalf("%v %+v", err, rep.Immediate)
		}
		if r := <-p.done; r.Observation.OutputTokens != b.N {
			b.Fatalf("picker counted %d tokens, want %d", r.Observation.OutputTokens, b.N)
		}
	})
}

// eventBody is an upstream body of n SSE events, one per read.
type eventBody struct {
	n     int
	event []byte
}

func (e *eventBody) Read(p []byte) (int, error) {
	if e.n == 0 {
		return 0, io.EOF
	}
	e.n--
	return copy(p, e.event), nil
}
