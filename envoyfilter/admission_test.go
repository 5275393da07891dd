package envoyfilter

import (
	"fmt"
	"math/rand"
	"strings"
	"sync"
	"testing"

	"github.com/envoyproxy/envoy/contrib/golang/common/go/api"

	"github.com/llmesh/llmesh/exchange"
	"github.com/llmesh/llmesh/testkit/fakesdk"
	"github.com/llmesh/llmesh/testkit/wait"
)

// refusalMesh: capacity 1; batch may queue one request; interactive waits
// at most 30ms.
const refusalMesh = `{
	"pools": [{"name": "sim", "protocol": "openai", "endpoints": ["127.0.0.1:9"], "capacity": {"max_inflight": 1}}],
	"classes": [
	  {"name": "interactive", "priority": 0, "queue": {"max_wait": "30ms"}},
	  {"name": "batch", "priority": 10, "queue": {"max_length": 1}}
	],
	"default_class": "batch",
	"classification": {"tenants": {"gold": "interactive"}}
}`

// TestAdmissionRefused: a full class queue answers 429 (gRPC
// RESOURCE_EXHAUSTED) and a request past its class's max wait 503 (gRPC
// UNAVAILABLE), both with the retry hint. The fake runs the reply through
// the filter's encode half, as Envoy does; the Record is the refusal, as
// the gateway records it, not the reply observed as the engine's response.
func TestAdmissionRefused(t *testing.T) {
	var mu sync.Mutex
	var recs []exchange.Record
	h := newHarness(t, `{"mesh": `+refusalMesh+`, "retry_after": "3s"}`, true, func(e *Env) {
		e.Recorder = exchange.RecorderFunc(func(r exchange.Record) {
			mu.Lock()
			recs = append(recs, r)
			mu.Unlock()
		})
	})
	a := h.stream(fakesdk.Options{})
	wantStatus(t, "A", a.DecodeHeaders(sseRequest(), true), api.Continue)
	b := h.stream(fakesdk.Options{})
	pb := b.StartDecodeHeaders(sseRequest(), true) // fills batch's queue
	h.waitQueued("batch", 1)

	for _, tc := range []struct {
		name   string
		hdr    *fakesdk.HeaderMap
		code   int
		grpc   int64
		header string
		value  string
		stat   string
	}{
		{"queue full", sseRequest(), 429, -1, "retry-after", "3", StatQueueFull},
		{"queue full grpc", grpcRequest(), 200, 8, "grpc-retry-pushback-ms", "3000", StatQueueFull},
		{"max wait", sseRequest("x-tenant-id", "gold"), 503, -1, "retry-after", "3", StatRejected},
		{"max wait grpc", grpcRequest("x-tenant-id", "gold"), 200, 14, "grpc-retry-pushback-ms", "3000", StatRejected},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := h.counter(tc.stat)
			s := h.stream(fakesdk.Options{})
			wantStatus(t, "DecodeHeaders", s.DecodeHeaders(tc.hdr, true), api.LocalReply)
			rep := s.Reply()
			if tc.grpc >= 0 {
				want(t, "grpc status", rep.GRPCStatus, tc.grpc)
			} else {
				want(t, "code", rep.Code, tc.code)
			}
			want(t, tc.header, rep.Headers[tc.header], []string{tc.value})
			want(t, tc.stat, h.counter(tc.stat)-before, 1)
			mu.Lock()
			n := len(recs)
			mu.Unlock()
			s.Complete()
			noViolations(t, s)
			mu.Lock()
			defer mu.Unlock()
			if len(recs) != n+1 {
				t.Fatalf("%d Records, want 1", len(recs)-n)
			}
			r := recs[n]
			got := fmt.Sprintf("status %d protocol %v complete %v chunks %d bytes %d error %v grpc %v",
				r.HTTPStatus, r.Protocol, r.Complete, r.Chunks, r.ResponseBytes, r.ErrorKind, r.HasGRPCStatus)
			want(t, "Record", got, "status 0 protocol auto complete false chunks 0 bytes 0 error http_status grpc false")
			if r.Err == nil {
				t.Error("Record.Err: nil, want the admission error")
			}
			want(t, "metadata error", s.Metadata(MetadataNamespace)["error"], "http_status")
		})
	}
	a.Complete()
	wantStatus(t, "B after A", pb.Wait(), api.Continue)
	b.Complete()
	want(t, "inflight", h.gauge(GaugeInflight), 0)
	want(t, "queued", h.gauge(GaugeQueued), 0)
}

// TestConcurrentStreams: many requests on many goroutines against a small
// pool; some clients vanish while queued, some mid-stream, the rest finish.
// Every admission is released once: the gauges return to zero, the
// scheduler admits new work afterwards, and no stream saw an SDK rule
// broken.
func TestConcurrentStreams(t *testing.T) {
	h := newHarness(t, `{"mesh": `+strings.Replace(testMesh("fifo", ""), `"max_inflight": 1`, `"max_inflight": 3`, 1)+`}`, true)
	const n = 40
	var wg sync.WaitGroup
	errs := make(chan string, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(i)))
			s := h.stream(fakesdk.Options{})
			p := s.StartDecodeHeaders(sseRequest(), true)
			switch rng.Intn(3) {
			case 0: // the client goes away, queued or not
				s.Destroy(api.Terminate)
				p.Wait()
			case 1: // goes away mid-stream
				if r := p.Wait(); r.Status != api.Continue {
					errs <- fmt.Sprintf("stream %d: %+v", i, r)
					return
				}
				s.EncodeHeaders(sseResponse(), false)
				s.EncodeData([]byte(sseChunks[0]), false)
				s.Destroy(api.Terminate)
			default:
				if r := p.Wait(); r.Status != api.Continue {
					errs <- fmt.Sprintf("stream %d: %+v", i, r)
					return
				}
				s.EncodeHeaders(sseResponse(), false)
				for j, c := range sseChunks {
					s.EncodeData([]byte(c), j == len(sseChunks)-1)
				}
				s.Complete()
			}
			if v := s.Violations(); len(v) > 0 || s.LateCalls() > 0 || len(s.Panics()) > 0 {
				errs <- fmt.Sprintf("stream %d: violations %v, late calls %d, panics %v", i, v, s.LateCalls(), s.Panics())
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	wait.Until(t, "gauges back to zero", func() bool {
		return h.gauge(GaugeQueued) == 0 && h.gauge(GaugeInflight) == 0
	})
	want(t, StatRequests, h.counter(StatRequests), n)
	// Capacity was not leaked: three new requests are admitted at once.
	var last []*fakesdk.Stream
	for i := 0; i < 3; i++ {
		s := h.stream(fakesdk.Options{})
		wantStatus(t, "after the storm", s.DecodeHeaders(sseRequest(), true), api.Continue)
		last = append(last, s)
	}
	for _, s := range last {
		s.Complete()
	}
}
