package exchange

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/llmesh/llmesh/api/llmv1"
	"github.com/llmesh/llmesh/testkit/grpcframe"
)

// sampleSSE is a stream exercising CRLF, CR, multi-line data, comments,
// multi-byte UTF-8 and escapes.
func sampleSSE() []byte {
	var b strings.Builder
	b.WriteString(": hello\r\n\r\n")
	b.WriteString("data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\r\n\r\n")
	words := []string{"héllo", " wörld", " 日本語", " \\\"q\\\"", " \\ud83d\\ude00", " end"}
	for i, w := range words {
		nl := "\n"
		if i%3 == 1 {
			nl = "\r\n"
		} else if i%3 == 2 {
			nl = "\r"
		}
		fmt.Fprintf(&b, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"%s\"}}]}%s%s", w, nl, nl)
	}
	b.WriteString("data: {\"choices\":[],\ndata: \"usage\":{\"prompt_tokens\":3,\"completion_tokens\":6}}\n\n")
	b.WriteString("data: [DONE]\n\n")
	return []byte(b.String())
}

func sampleGRPC(t testing.TB) []byte {
	var out []byte
	for _, f := range llmV1Stream(t) {
		out = append(out, f...)
	}
	out = append(out, grpcframe.Raw(1, []byte("compressed"))...)
	return append(out, grpcframe.Message(&llmv1.GenerateResponse{TokenIds: []uint32{1 << 20}, Text: "ü"})...)
}

// observeSplit feeds data split at the given cut points, every piece at
// the same instant, and returns the observation.
func observeSplit(opts Options, ct string, data []byte, cuts []int) (Observation, bool) {
	return observeSplitPath(opts, ct, data, cuts, false)
}

// observeSplitPath is observeSplit with the SSE fast path turned off when
// general is set, so the two paths can be compared.
func observeSplitPath(opts Options, ct string, data []byte, cuts []int, general bool) (Observation, bool) {
	opts.GeneralScan = general
	o := NewObserver(opts)
	o.MarkReceived(at(0))
	o.ResponseHeaders(at(1), 200, MapHeaders{"content-type": ct})
	prev, errored := 0, false
	for _, c := range append(cuts, len(data)) {
		if err := o.Observe(at(5), data[prev:c]); err != nil {
			errored = true
		}
		prev = c
	}
	o.Trailers(at(6), MapHeaders{"grpc-status": "0"})
	o.Finish(at(6), nil)
	return o.Observation(), errored
}

func randomCuts(r *rand.Rand, n int) []int {
	if n == 0 {
		return nil
	}
	k := r.IntN(min(n, 40) + 1)
	cuts := make([]int, 0, k)
	for range k {
		cuts = append(cuts, r.IntN(n+1))
	}
	// Sorted, so pieces are contiguous.
	for i := 1; i < len(cuts); i++ {
		for j := i; j > 0 && cuts[j] < cuts[j-1]; j-- {
			cuts[j], cuts[j-1] = cuts[j-1], cuts[j]
		}
	}
	return cuts
}

func TestSplitInvariance(t *testing.T) {
	cases := []struct {
		ct   string
		opts Options
		data []byte
	}{
		{"text/event-stream", Options{KeepOutput: true}, sampleSSE()},
		{"application/grpc", Options{GRPCMethod: MethodLLMV1, KeepOutput: true}, sampleGRPC(t)},
	}
	r := rand.New(rand.NewPCG(1, 2))
	for _, tc := range cases {
		want, werr := observeSplit(tc.opts, tc.ct, tc.data, nil)
		if werr || !want.OK() || want.TokenChunks < 5 {
			t.Fatalf("%s: baseline %+v", tc.ct, want)
		}
		// Every single cut point, then random multi-cut splits.
		for c := 0; c <= len(tc.data); c++ {
			got, _ := observeSplit(tc.opts, tc.ct, tc.data, []int{c})
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("%s cut at %d (-want +got):\n%s", tc.ct, c, diff)
			}
		}
		for range 500 {
			cuts := randomCuts(r, len(tc.data))
			got, _ := observeSplit(tc.opts, tc.ct, tc.data, cuts)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("%s cuts %v (-want +got):\n%s", tc.ct, cuts, diff)
			}
		}
	}
	if want, _ := observeSplit(Options{KeepOutput: true}, "text/event-stream", sampleSSE(), nil); want.Text != "héllo wörld 日本語 \"q\" 😀 end" {
		t.Errorf("text %q", want.Text)
	}
}

// splitFromSeed derives cut points from fuzzer-chosen bytes.
func splitFromSeed(seed uint64, n int) []int {
	return randomCuts(rand.New(rand.NewPCG(seed, seed>>7)), n)
}

func FuzzObserveSSE(f *testing.F) {
	f.Add(sampleSSE(), uint64(1))
	f.Add([]byte("data: {\"choices\":[{\"text\":\"x\"}]}\r\r\ndata: [DONE]\n\n"), uint64(7))
	f.Add([]byte("event: error\ndata: boom\n\n"), uint64(3))
	f.Add([]byte("data: {\"error\":{\"message\":\"m\"}}\n\n:c\n"), uint64(9))
	f.Add([]byte("data: "+strings.Repeat("{", 300)+"\n\n"), uint64(2))
	f.Add([]byte(stopAfterMalformed), uint64(4))
	// Fast-path shapes: one repeated, one learned from a two-line event.
	f.Add([]byte(chatDelta("a")+chatDelta("b")+chatDelta(`\"c`)+chatDelta("")+"data: [DONE]\n\n"), uint64(5))
	f.Add([]byte("data: {\"choices\":[{\"text\":\ndata: \"a\"}]}\n\ndata: {\"choices\":[{\"text\":\n\"b\"}]}\n\n"), uint64(6))
	f.Fuzz(func(t *testing.T, data []byte, seed uint64) {
		opts := Options{KeepOutput: true, MaxEventBytes: 512}
		cuts := splitFromSeed(seed, len(data))
		want, _ := observeSplit(opts, "text/event-stream", data, nil)
		got, _ := observeSplit(opts, "text/event-stream", data, cuts)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("split changed the observation (-whole +split):\n%s", diff)
		}
		// The fast path must agree with the general scanner.
		general, _ := observeSplitPath(opts, "text/event-stream", data, cuts, true)
		if diff := cmp.Diff(general, got); diff != "" {
			t.Fatalf("fast path differs from the general scanner (-general +fast):\n%s", diff)
		}
		if got.TokenChunks < 0 || got.DecodeSteps < 0 || got.ResponseBytes != int64(len(data)) {
			t.Fatalf("bad counters %+v", got)
		}
	})
}

func FuzzObserveGRPC(f *testing.F) {
	f.Add(sampleGRPC(f), uint64(1), false)
	f.Add(grpcframe.Raw(0, []byte{0x0a, 0x02, 0x01, 0x02, 0x12, 0x01, 'x'}), uint64(5), true)
	f.Add([]byte{0, 0xff, 0xff, 0xff, 0xff, 1, 2, 3}, uint64(2), false)
	f.Add(grpcframe.Raw(1, []byte("zz")), uint64(3), true)
	f.Fuzz(func(t *testing.T, data []byte, seed uint64, vllm bool) {
		opts := Options{GRPCMethod: MethodLLMV1, KeepOutput: true, MaxFrameBytes: 1024}
		if vllm {
			opts.GRPCMethod = MethodVLLM
		}
		want, _ := observeSplit(opts, "application/grpc", data, nil)
		got, _ := observeSplit(opts, "application/grpc", data, splitFromSeed(seed, len(data)))
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("split changed the observation (-whole +split):\n%s", diff)
		}
	})
}

// FuzzScanChunk checks the JSON chunk scanner against encoding/json: it
// must accept every valid object, and never panic on anything.
func FuzzScanChunk(f *testing.F) {
	for _, s := range []string{
		`{"choices":[{"index":0,"delta":{"content":"hi"}}],"usage":{"completion_tokens":3}}`,
		`{"choices":[{"text":"a\u00e9\\\"","finish_reason":"stop"}],"llmesh_engine":{"arrival_ns":1e3,"preemptions":-1}}`,
		`{"error":{"message":"x"},"object":"error"}`,
		`{"a":[1,2,{"b":null}],"choices":null,"usage":true}`,
		`{"choices":[[],{},"x",{"delta":{"tool_calls":[{}]}}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		o := NewObserver(Options{KeepOutput: true})
		var r chunkResult
		err := o.scanChunk(data, &r)
		trimmed := bytes.TrimLeft(data, " \t\r\n")
		if json.Valid(data) && len(trimmed) > 0 && trimmed[0] == '{' && err != nil {
			t.Fatalf("valid JSON object rejected: %v", err)
		}
		if r.tokens < 0 {
			t.Fatalf("negative tokens")
		}
	})
}
