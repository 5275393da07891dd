package epp_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/llmesh/llmesh/epp"
	"github.com/llmesh/llmesh/epp/epptest"
	"github.com/llmesh/llmesh/exchange"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/testkit/wait"
)

// The pick lands in the header and in the dynamic metadata, with the same
// value; in full duplex mode the picker streams the body back whole; the
// response's end releases the lease.
func TestPickInHeaderAndMetadata(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			p := startPicker(t, nil)
			call, pick, err := p.driver(m.mode).Start(ctx(t), chat(nil))
			if err != nil {
				t.Fatal(err)
			}
			if pick.Immediate != nil {
				t.Fatalf("immediate response %v", pick.Immediate)
			}
			if pick.Header != ep1 && pick.Header != ep2 {
				t.Fatalf("header pick %q, want one of the pool's endpoints", pick.Header)
			}
			if pick.Metadata != pick.Header {
				t.Fatalf("metadata pick %q, header pick %q: must be equal", pick.Metadata, pick.Header)
			}
			if string(pick.Body) != chatBody {
				t.Fatalf("forwarded body %q, want %q", pick.Body, chatBody)
			}
			if got := p.stats().InFlight; got != 1 {
				t.Fatalf("in flight %d while the response runs, want 1", got)
			}
			if _, err := call.Respond(epptest.Response{Status: 200, Headers: map[string]string{"content-type": "text/event-stream"},
				Chunks: [][]byte{[]byte(sse(3))}, Served: pick.Header}); err != nil {
				t.Fatal(err)
			}
			r := p.record(t)
			if r.Outcome != scheduler.Done || !r.Admitted || r.Endpoint != pick.Header || r.Served != pick.Header || r.Class != "interactive" {
				t.Fatalf("record %+v", r)
			}
			wait.Until(t, "lease released", func() bool { return p.stats().InFlight == 0 })
			if s := p.stats(); s.Admitted != 1 {
				t.Fatalf("admitted %d, want 1 (the lease released exactly once)", s.Admitted)
			}
		})
	}
}

// A request without a body (a GET) gets its pick on the headers answer.
func TestPickHeadersOnly(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			p := startPicker(t, nil)
			r := epptest.Request{Headers: map[string]string{":method": "GET", ":path": "/v1/models"}}
			call, pick, err := p.driver(m.mode).Start(ctx(t), r)
			if err != nil {
				t.Fatal(err)
			}
			if pick.Header == "" || pick.Header != pick.Metadata {
				t.Fatalf("pick %+v", pick)
			}
			if _, err := call.Respond(epptest.Response{Status: 200}); err != nil {
				t.Fatal(err)
			}
			if r := p.record(t); r.Outcome != scheduler.Done {
				t.Fatalf("record %+v", r)
			}
		})
	}
}

// A subset from the data plane restricts the pick, even where the
// scheduler's own pick (least loaded: the first endpoint) is outside it.
func TestSubsetHonoured(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			p := startPicker(t, nil)
			for i := 0; i < 3; i++ {
				r := chat(nil)
				r.Subset, r.SubsetSet = []string{ep2}, true
				call, pick, err := p.driver(m.mode).Start(ctx(t), r)
				if err != nil {
					t.Fatal(err)
				}
				if pick.Header != ep2 || pick.Metadata != ep2 {
					t.Fatalf("pick %+v, want %s", pick, ep2)
				}
				if _, err := call.Respond(epptest.Response{Status: 200}); err != nil {
					t.Fatal(err)
				}
				p.record(t)
			}
		})
	}
}

// No ready endpoint in the subset: 503, with the OpenAI error body the
// other hosts send; nothing is admitted.
func TestSubsetNoReadyEndpoint(t *testing.T) {
	cases := map[string][]string{
		"not in pool": {"10.9.9.9:1"},
		"empty":       {},
		"drained":     {ep2},
	}
	for name, subset := range cases {
		t.Run(name, func(t *testing.T) {
			p := startPicker(t, nil)
			if name == "drained" {
				if err := p.sched.SetEndpointHealth("llm", ep2, false); err != nil {
					t.Fatal(err)
				}
			}
			r := chat(nil)
			r.Subset, r.SubsetSet = subset, true
			_, pick, err := p.driver(epptest.FullDuplex).Start(ctx(t), r)
			if err != nil {
				t.Fatal(err)
			}
			im := pick.Immediate
			if im == nil || im.GetStatus().GetCode() != 503 {
				t.Fatalf("want an immediate 503, got %+v", pick)
			}
			var body struct {
				Error struct {
					Message, Type string
					Code          int
				}
			}
			if err := json.Unmarshal(im.GetBody(), &body); err != nil || body.Error.Code != 503 || !strings.Contains(body.Error.Message, "no ready endpoint") {
				t.Fatalf("body %s (%v)", im.GetBody(), err)
			}
			reply := ""
			for _, h := range im.GetHeaders().GetSetHeaders() {
				if h.GetHeader().GetKey() == "x-llmesh-reply" {
					reply = string(h.GetHeader().GetRawValue())
				}
			}
			if reply != "llmesh_rejected" || im.GetDetails() != "llmesh_rejected" {
				t.Fatalf("x-llmesh-reply %q, details %q, want llmesh_rejected", reply, im.GetDetails())
			}
			if s := p.stats(); s.Admitted != 0 {
				t.Fatalf("admitted %d, want 0", s.Admitted)
			}
		})
	}
}

// A malformed subset is the data plane's bad request: 400 naming the key.
func TestSubsetMalformed(t *testing.T) {
	p := startPicker(t, nil)
	r := chat(nil)
	r.Subset, r.SubsetSet = []string{"10.0.0.1"}, true
	_, pick, err := p.driver(epptest.Buffered).Start(ctx(t), r)
	if err != nil {
		t.Fatal(err)
	}
	if pick.Immediate == nil || pick.Immediate.GetStatus().GetCode() != 400 ||
		!strings.Contains(string(pick.Immediate.GetBody()), "x-gateway-destination-endpoint-subset[0]") {
		t.Fatalf("want 400 naming the subset element, got %+v", pick)
	}
}

// The pool full, a high-priority request that arrives after a queued
// low-priority one is admitted first; the x-llm-d-inference-objective
// header names the classes.
func TestQueueingByClass(t *testing.T) {
	p := startPicker(t, nil)
	d := p.driver(epptest.FullDuplex)
	var held []*epptest.Call
	for i := 0; i < 2; i++ {
		c, pick, err := d.Start(ctx(t), chat(nil))
		if err != nil || pick.Immediate != nil {
			t.Fatalf("fill %d: %v %+v", i, err, pick)
		}
		held = append(held, c)
	}
	type result struct {
		call *epptest.Call
		pick epptest.Pick
		err  error
	}
	start := func(class string) chan result {
		ch := make(chan result, 1)
		go func() {
			c, pick, err := d.Start(ctx(t), chat(map[string]string{epp.ObjectiveHeader: class}))
			ch <- result{c, pick, err}
		}()
		return ch
	}
	low := start("batch")
	wait.Until(t, "batch queued", func() bool { return p.stats().Queued["batch"] == 1 })
	high := start("interactive")
	wait.Until(t, "interactive queued", func() bool { return p.stats().Queued["interactive"] == 1 })
	if _, err := held[0].Respond(epptest.Response{Status: 200}); err != nil {
		t.Fatal(err)
	}
	var h result
	select {
	case h = <-high:
	case r := <-low:
		t.Fatalf("low-priority request admitted first: %+v", r)
	case <-time.After(5 * time.Second):
		t.Fatal("nothing admitted after a release")
	}
	if h.err != nil || h.pick.Header == "" {
		t.Fatalf("high: %v %+v", h.err, h.pick)
	}
	select {
	case r := <-low:
		t.Fatalf("low-priority request admitted while the pool is full: %+v", r)
	case <-time.After(20 * time.Millisecond):
	}
	if _, err := held[1].Respond(epptest.Response{Status: 200}); err != nil {
		t.Fatal(err)
	}
	l := <-low
	if l.err != nil || l.pick.Header == "" {
		t.Fatalf("low: %v %+v", l.err, l.pick)
	}
	for _, c := range []*epptest.Call{h.call, l.call} {
		if _, err := c.Respond(epptest.Response{Status: 200}); err != nil {
			t.Fatal(err)
		}
	}
	classes := map[string]int{}
	for i := 0; i < 4; i++ {
		classes[p.record(t).Class]++
	}
	if classes["interactive"] != 3 || classes["batch"] != 1 {
		t.Fatalf("classes %v", classes)
	}
}

// The class's queue is full: 429 with the queue_full error body and a
// retry hint.
func TestQueueFull(t *testing.T) {
	p := startPicker(t, nil)
	d := p.driver(epptest.Buffered)
	for i := 0; i < 2; i++ {
		if _, _, err := d.Start(ctx(t), chat(nil)); err != nil {
			t.Fatal(err)
		}
	}
	go func() { _, _, _ = d.Start(ctx(t), chat(map[string]string{"x-llmesh-lane": "batch"})) }()
	wait.Until(t, "batch queued", func() bool { return p.stats().Queued["batch"] == 1 })
	_, pick, err := d.Start(ctx(t), chat(map[string]string{"x-llmesh-lane": "batch"}))
	if err != nil {
		t.Fatal(err)
	}
	im := pick.Immediate
	if im == nil || im.GetStatus().GetCode() != 429 || !strings.Contains(string(im.GetBody()), `"type":"queue_full"`) {
		t.Fatalf("want 429 queue_full, got %+v", pick)
	}
	retry := false
	for _, h := range im.GetHeaders().GetSetHeaders() {
		retry = retry || h.GetHeader().GetKey() == "retry-after"
	}
	if !retry {
		t.Fatal("429 without retry-after")
	}
}

// The client goes away mid-response: the lease is released (cancelled)
// once; the client goes away while queued: the request leaves the queue.
func TestReleaseOnCancel(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			p := startPicker(t, nil)
			d := p.driver(m.mode)
			call, _, err := d.Start(ctx(t), chat(nil))
			if err != nil {
				t.Fatal(err)
			}
			call.Cancel()
			if r := p.record(t); r.Outcome != scheduler.Cancelled || !r.Admitted {
				t.Fatalf("record %+v", r)
			}
			wait.Until(t, "lease released", func() bool { return p.stats().InFlight == 0 })

			// Queued, then gone.
			var held []*epptest.Call
			for i := 0; i < 2; i++ {
				c, _, err := d.Start(ctx(t), chat(nil))
				if err != nil {
					t.Fatal(err)
				}
				held = append(held, c)
			}
			qctx, cancel := context.WithCancel(ctx(t))
			errc := make(chan error, 1)
			go func() { _, _, err := d.Start(qctx, chat(nil)); errc <- err }()
			wait.Until(t, "queued", func() bool { return p.stats().Queued["interactive"] == 1 })
			cancel()
			if err := <-errc; status.Code(err) != codes.Canceled && !errors.Is(err, context.Canceled) {
				t.Fatalf("queued call ended with %v", err)
			}
			wait.Until(t, "left the queue", func() bool { return p.stats().Queued["interactive"] == 0 })
			for _, c := range held {
				c.Cancel()
			}
			wait.Until(t, "all released", func() bool { return p.stats().InFlight == 0 })
		})
	}
}

// A body split across chunks is parsed whole: the scheduler sizes the
// request from it (its prompt tokens + max_tokens 100).
func TestBodySplitAcrossChunks(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			p := startPicker(t, nil)
			r := chat(nil)
			r.Chunks = split(chatBody, 5)
			call, pick, err := p.driver(m.mode).Start(ctx(t), r)
			if err != nil || pick.Immediate != nil {
				t.Fatalf("%v %+v", err, pick)
			}
			if string(pick.Body) != chatBody {
				t.Fatalf("forwarded body %q", pick.Body)
			}
			whole, err := exchange.ParseOpenAIRequest([]byte(chatBody))
			if err != nil {
				t.Fatal(err)
			}
			want := whole.PromptTokens() + 100
			if got := p.stats().InFlightTokens; got != want {
				t.Fatalf("in-flight tokens %d, want %d (the whole body's prompt + max_tokens 100)", got, want)
			}
			call.Cancel()
		})
	}
}

// A body over the limit: 413 before any admission.
func TestBodyTooLarge(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			p := startPicker(t, func(c *epp.Config) { c.MaxBodyBytes = 64 })
			r := chat(nil)
			r.Chunks = split(chatBody, 4)
			_, pick, err := p.driver(m.mode).Start(ctx(t), r)
			if err != nil {
				t.Fatal(err)
			}
			if pick.Immediate == nil || pick.Immediate.GetStatus().GetCode() != 413 {
				t.Fatalf("want 413, got %+v", pick)
			}
			if p.stats().Admitted != 0 {
				t.Fatal("admitted a request over the body limit")
			}
		})
	}
}

// SSE tokens are counted from the response body chunks, events split
// across chunks; TTFT is measured; the lease sees progress.
func TestSSETokenCounting(t *testing.T) {
	for _, m := range []epptest.Mode{epptest.Streamed, epptest.FullDuplex} {
		t.Run(m.String(), func(t *testing.T) {
			p := startPicker(t, nil)
			call, _, err := p.driver(m).Start(ctx(t), chat(nil))
			if err != nil {
				t.Fatal(err)
			}
			body := sse(7)
			got, err := call.Respond(epptest.Response{Status: 200, Headers: map[string]string{"content-type": "text/event-stream"},
				Chunks: split(body, 9)})
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != body {
				t.Fatalf("client got %q", got)
			}
			o := p.record(t).Observation
			if o.CountedTokens != 7 || !o.HasTTFT || !o.Complete {
				t.Fatalf("observation: tokens %d, ttft %v (%v), complete %v", o.CountedTokens, o.TTFT, o.HasTTFT, o.Complete)
			}
		})
	}
}

// An upstream error status or a truncated stream counts as failed, as in
// the other hosts (the core's outcome); a whole stream as done.
func TestUpstreamFailure(t *testing.T) {
	for _, tc := range []struct {
		name string
		resp epptest.Response
		want scheduler.Outcome
	}{
		{"5xx", epptest.Response{Status: 503, Chunks: [][]byte{[]byte("busy")}}, scheduler.Failed},
		{"4xx", epptest.Response{Status: 429, Chunks: [][]byte{[]byte("slow down")}}, scheduler.Failed},
		{"truncated", epptest.Response{Status: 200, Headers: map[string]string{"content-type": "text/event-stream"},
			Chunks: [][]byte{[]byte("data: {\"choices\":[{\"text\":\"a\"}]}\n\n")}}, scheduler.Failed},
		{"whole", epptest.Response{Status: 200, Headers: map[string]string{"content-type": "text/event-stream"},
			Chunks: [][]byte{[]byte(sse(2))}}, scheduler.Done},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := startPicker(t, nil)
			call, _, err := p.driver(epptest.FullDuplex).Start(ctx(t), chat(nil))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := call.Respond(tc.resp); err != nil {
				t.Fatal(err)
			}
			if r := p.record(t); r.Outcome != tc.want || r.Status != tc.resp.Status {
				t.Fatalf("record: outcome %v status %d, want %v %d", r.Outcome, r.Status, tc.want, tc.resp.Status)
			}
		})
	}
}

// Streams without protocol_config use Config.BodyMode.
func TestNoProtocolConfig(t *testing.T) {
	p := startPicker(t, func(c *epp.Config) { c.BodyMode = epptest.Buffered })
	d := p.driver(epptest.Buffered)
	d.NoProtocolConfig = true
	_, pick, err := d.Start(ctx(t), chat(nil))
	if err != nil || pick.Header == "" {
		t.Fatalf("%v %+v", err, pick)
	}
}

// The scheduler is closed: fail closed answers 503, fail open picks.
func TestFailOpen(t *testing.T) {
	for _, open := range []bool{false, true} {
		p := startPicker(t, func(c *epp.Config) { c.FailOpen = open })
		_ = p.sched.Close()
		_, pick, err := p.driver(epptest.FullDuplex).Start(ctx(t), chat(nil))
		if err != nil {
			t.Fatal(err)
		}
		if open && (pick.Header == "" || pick.Immediate != nil) {
			t.Fatalf("fail open: %+v", pick)
		}
		if !open && (pick.Immediate == nil || pick.Immediate.GetStatus().GetCode() != 503) {
			t.Fatalf("fail closed: %+v", pick)
		}
	}
}

// gRPC health: liveness, readiness and the ext_proc service; Shutdown
// makes readiness NOT_SERVING and leaves liveness.
func TestHealth(t *testing.T) {
	p := startPicker(t, nil)
	hc := healthpb.NewHealthClient(p.conn)
	check := func(svc string) healthpb.HealthCheckResponse_ServingStatus {
		r, err := hc.Check(ctx(t), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil {
			t.Fatalf("%q: %v", svc, err)
		}
		return r.GetStatus()
	}
	for _, svc := range epp.HealthServices {
		if got := check(svc); got != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("%q: %v", svc, got)
		}
	}
	p.srv.Shutdown()
	if got := check("readiness"); got != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("readiness after shutdown: %v", got)
	}
	if got := check("liveness"); got != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("liveness after shutdown: %v", got)
	}
}

// Config errors name the field.
func TestNewErrors(t *testing.T) {
	_, err := epp.New(epp.Config{MaxBodyBytes: -1})
	for _, want := range []string{"Mesh: required", "Admitter: required", "MaxBodyBytes: -1"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not say %q", err, want)
		}
	}
}

// A body larger than gRPC's default 4 MiB message, split as Envoy splits
// it, goes back to the data plane whole in full duplex mode (in pieces).
func TestLargeBodyFullDuplex(t *testing.T) {
	p := startPicker(t, nil)
	prompt := strings.Repeat("x", 5<<20)
	body := `{"model":"m","prompt":"` + prompt + `","max_tokens":1}`
	// The batch lane has no max_wait, and the deadline is long: reading
	// and guarding 5 MiB (parse, then the engine-priority guard's scan)
	// takes seconds under the race detector, counted from the arrival.
	r := epptest.Request{Headers: map[string]string{":method": "POST", ":path": "/v1/completions", "x-llmesh-lane": "batch"},
		Chunks: split(body, 40)}
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	call, pick, err := p.driver(epptest.FullDuplex).Start(c, r)
	if err != nil || pick.Immediate != nil {
		t.Fatalf("%v: immediate %d %q", err, pick.Immediate.GetStatus().GetCode(), pick.Immediate.GetBody())
	}
	if string(pick.Body) != body {
		t.Fatalf("forwarded %d bytes, want %d", len(pick.Body), len(body))
	}
	call.Cancel()
}
