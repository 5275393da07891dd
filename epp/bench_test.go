//go:build linux

package epp_test

import (
	"bytes"
	"context"
	"io"
	"strconv"
	"strings"
	"testing"

	"github.com/llmesh/llmesh/epp/epptest"
	"github.com/llmesh/llmesh/exchange"
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

// BenchmarkGuardBody measures the engine-priority guard's scan in the
// picker's body path: one whole ext_proc stream per op in full duplex mode
// (as BenchmarkDecision/request), a completions body of 1 KiB, 64 KiB or
// 1 MiB sent in 64 KiB chunks, with and without a top-level "priority", to
// pool strip of testdata/mesh-guard.yaml (the guard strips a client's
// priority). Each size and body runs three ways, side by side:
//
//   - guard: an untrusted client; the guard scans the body (and strips
//     the priority when there is one) before the pick;
//   - no-guard: the same request with the trusted marker, which keeps
//     the client's priority, so the guard does not run: the picker's path
//     without it;
//   - scan: the guard's scan alone (exchange.RewriteJSONPriority), on this
//     goroutine, without the picker around it.
//
// MB/s is body bytes per second; cpu-ns/op is the whole process's CPU
// (both gRPC ends) for the stream ops, the goroutine's for scan.
func BenchmarkGuardBody(b *testing.B) {
	p := startPickerMesh(b, "testdata/mesh-guard.yaml", nil)
	d := p.driver(epptest.FullDuplex)
	resp := epptest.Response{Status: 200, Headers: map[string]string{"content-type": "application/json"},
		Chunks: [][]byte{[]byte(`{"choices":[{"text":"t"}],"usage":{"prompt_tokens":1,"completion_tokens":1}}`)}}
	for _, size := range []struct {
		name string
		n    int
	}{{"1KiB", 1 << 10}, {"64KiB", 64 << 10}, {"1MiB", 1 << 20}} {
		for _, prio := range []bool{false, true} {
			body := guardBenchBody(size.n, prio)
			name := size.name + "/no-priority"
			if prio {
				name = size.name + "/priority"
			}
			for _, way := range []string{"guard", "no-guard"} {
				h := map[string]string{":method": "POST", ":path": "/v1/completions", "content-type": "application/json",
					"content-length": strconv.Itoa(len(body)), "x-lane": "strip"}
				if way == "no-guard" {
					h["x-mesh-trusted"] = "s3cret"
				}
				req := epptest.Request{Headers: h, Chunks: chunks(body, 64<<10)}
				b.Run(name+"/"+way, func(b *testing.B) {
					ctx := context.Background()
					b.SetBytes(int64(len(body)))
					b.ReportAllocs()
					cputime.ReportProcess(b)
					for i := 0; i < b.N; i++ {
						call, pick, err := d.Start(ctx, req)
						if err != nil || pick.Immediate != nil {
							b.Fatalf("%v %v", err, pick.Immediate)
						}
						if prio && (way == "guard") == bytes.Contains(pick.Body, []byte(`"priority"`)) {
							b.Fatalf("%s: forwarded body has priority %v", way, !(way == "guard"))
						}
						if _, err := call.Respond(resp); err != nil {
							b.Fatal(err)
						}
						<-p.done
					}
				})
			}
			b.Run(name+"/scan", func(b *testing.B) {
				b.SetBytes(int64(len(body)))
				b.ReportAllocs()
				cputime.ReportThread(b)
				for i := 0; i < b.N; i++ {
					out, changed, err := exchange.RewriteJSONPriority(body, exchange.EnginePriority{Mode: exchange.PriorityStrip})
					if err != nil || changed != prio || len(out) != len(body) {
						b.Fatalf("changed %v err %v", changed, err)
					}
				}
			})
		}
	}
}

// guardBenchBody is a completions body of n bytes whose prompt is plain
// text, with "priority" as its last member when prio.
func guardBenchBody(n int, prio bool) []byte {
	head := `{"model":"m","max_tokens":8,"prompt":"`
	tail := `"}`
	if prio {
		tail = `","priority":-100}`
	}
	fill := n - len(head) - len(tail)
	words := strings.Repeat("tell me a story ", fill/16+1)[:fill]
	return []byte(head + words + tail)
}

// chunks cuts b into pieces of at most n bytes, as Envoy hands on a body.
func chunks(b []byte, n int) [][]byte {
	var out [][]byte
	for len(b) > 0 {
		k := min(n, len(b))
		out = append(out, b[:k])
		b = b[k:]
	}
	return out
}
