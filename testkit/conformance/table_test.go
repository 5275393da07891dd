package conformance

import (
	"fmt"
	"strings"
	"testing"

	"github.com/llmesh/llmesh/api/llmv1"
	"github.com/llmesh/llmesh/api/vllmpb"
	"github.com/llmesh/llmesh/exchange"
)

// engineAddr is the host:port of the mesh's HTTP engine (the recorder in
// front of the sim) of the table now running, for the rows whose request
// names it (an upstream pick); loadMesh sets it.
var engineAddr string

// Scenarios: what runs around a row's request.
const (
	// queued: an interactive request holds the pool's one slot (the sim
	// stalls it after its first token) while the row's request waits.
	queued = "queued"
	// preempted: the row's request (batch, stalled after its first token)
	// is preempted by an interactive request whose TTFT SLO is at risk.
	preempted = "preempted"
	// cancelQueued: the row's request waits behind a slot holder and its
	// client goes away.
	cancelQueued = "cancel-queued"
	// queueFull: a slot holder and one waiting "limited" request fill the
	// class's queue (max_length 1) before the row's request arrives.
	queueFull = "queue-full"
)

// fault asks the sim for a fault (sim/server/faults.go).
const fault = "x-llmesh-sim-fault"

var u32 = func(v uint32) *uint32 { return &v }

// like is a request to the same pool as r (llm.v1 for gRPC, completions
// otherwise) with its own prompt, length and headers.
func like(m string, r request, prompt string, maxTokens int, stream bool, kv ...string) request {
	if r.grpc() {
		return llm(&llmv1.GenerateRequest{Model: "MODEL", Prompt: prompt, MaxTokens: uint32(maxTokens)}, kv...)(m)
	}
	return completion(fmt.Sprintf(`{"model":"MODEL","prompt":%q,"max_tokens":%d,"stream":%v}`, prompt, maxTokens, stream), kv...)(m)
}

// holder holds the slot of the pool r goes to: interactive, stalled 2 s
// of engine time (0.2 s at the sim's 10× speed) after its first token.
func holder(m string, r request) request {
	return like(m, r, "hold the slot", 3, true, "x-tenant-id", "gold", fault, "stall=2s")
}

// runScenario runs tc on h and returns the row's response and how many
// Records the row produces.
func runScenario(t *testing.T, h host, tc tcase, model string) (response, int) {
	t.Helper()
	req := tc.req(model)
	switch tc.scenario {
	case "":
		return h.do(t, req), 1
	case queued:
		hold := holder(model, req)
		hold.started = make(chan struct{})
		done := make(chan response, 1)
		go func() { done <- h.do(t, hold) }()
		<-hold.started
		resp := h.do(t, req)
		<-done
		return resp, 2
	case preempted:
		req.started = make(chan struct{})
		done := make(chan response, 1)
		go func() { done <- h.do(t, req) }()
		<-req.started
		pre := like(model, req, "urgent", 2, false, "x-tenant-id", "gold")
		h.do(t, pre)
		return <-done, 2
	case cancelQueued:
		hold := holder(model, req)
		hold.started = make(chan struct{})
		held := make(chan response, 1)
		go func() { held <- h.do(t, hold) }()
		<-hold.started
		h.adm().wait(t, 1)
		req.queued = func() { h.adm().wait(t, 1) }
		resp := h.do(t, req)
		<-held
		return resp, 2
	case queueFull:
		hold := holder(model, req)
		hold.started = make(chan struct{})
		held := make(chan response, 1)
		go func() { held <- h.do(t, hold) }()
		<-hold.started
		h.adm().wait(t, 1)
		wait := like(model, req, "waiting", 1, false, "x-tenant-id", "lim")
		waited := make(chan response, 1)
		go func() { waited <- h.do(t, wait) }()
		h.adm().waitQueued(t, "limited")
		resp := h.do(t, req)
		<-held
		<-waited
		return resp, 3
	}
	t.Fatalf("unknown scenario %q", tc.scenario)
	return response{}, 0
}

// longPrompt has no trailing space: HTTP parsers (net/http, Envoy's) strip
// it from header values, the fake SDK does not.
var longPrompt = strings.TrimSpace(strings.Repeat("a long prompt moved by the proxy ", 4))

var table = []tcase{
	// Completions and chat, streamed and not.
	{name: "completions SSE with usage", wantStatus: 200,
		req: completion(`{"model":"MODEL","prompt":"tell me","max_tokens":6,"stream":true,"stream_options":{"include_usage":true}}`)},
	{name: "completions SSE without usage", wantStatus: 200,
		req: completion(`{"model":"MODEL","prompt":"tell me","max_tokens":5,"stream":true}`)},
	{name: "completions JSON", wantStatus: 200,
		req: completion(`{"model":"MODEL","prompt":"tell me","max_tokens":4}`)},
	{name: "completions one token", wantStatus: 200,
		req: completion(`{"model":"MODEL","prompt":"tell me","max_tokens":1,"stream":true,"stream_options":{"include_usage":true}}`)},
	{name: "chat SSE with usage", wantStatus: 200,
		req: chat(`{"model":"MODEL","messages":[{"role":"user","content":"hi"}],"max_tokens":6,"stream":true,"stream_options":{"include_usage":true}}`)},
	{name: "chat SSE without usage", wantStatus: 200,
		req: chat(`{"model":"MODEL","messages":[{"role":"user","content":"hi"}],"max_tokens":3,"stream":true}`)},
	{name: "chat JSON", wantStatus: 200,
		req: chat(`{"model":"MODEL","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}],"max_tokens":4}`)},

	// gRPC: llm.v1 and vLLM.
	{name: "llm.v1 Generate", wantStatus: 200, wantGRPC: "0",
		req: llm(&llmv1.GenerateRequest{Model: "MODEL", Prompt: "a grpc prompt", MaxTokens: 5, Sampling: &llmv1.SamplingParams{IgnoreEos: true}})},
	{name: "vLLM Generate", wantStatus: 200, wantGRPC: "0",
		req: vllm(&vllmpb.GenerateRequest{Input: &vllmpb.GenerateRequest_Text{Text: "a vllm prompt"}, Stream: true,
			SamplingParams: &vllmpb.SamplingParams{MaxTokens: u32(4), IgnoreEos: true}})},
	// Both hosts treat gRPC-Web as gRPC and pass it as is; the sim speaks
	// only gRPC and refuses it (Envoy deployments translate gRPC-Web in
	// the grpc_web filter first).
	{name: "gRPC-Web passes to the engine as is", wantStatus: 415, wantGRPC: "3",
		req: func(m string) request {
			r := llm(&llmv1.GenerateRequest{Model: "MODEL", Prompt: "a web prompt", MaxTokens: 2})(m)
			r.headers = []string{"content-type", "application/grpc-web+proto", "te", "trailers"}
			return r
		}},
	{name: "llm.v1 invalid request", wantStatus: 200, wantGRPC: "3",
		req: llm(&llmv1.GenerateRequest{Model: "MODEL", MaxTokens: 2})},

	// Classification.
	{name: "tenant picks the class", wantStatus: 200,
		req: completion(`{"model":"MODEL","prompt":"gold","max_tokens":2}`, "x-tenant-id", "gold")},
	{name: "trusted class header", wantStatus: 200,
		req: completion(`{"model":"MODEL","prompt":"marked","max_tokens":2}`, "x-llmesh-class", "interactive", "x-mesh-trusted", "s3cret")},
	{name: "untrusted class header is ignored", wantStatus: 200,
		req: completion(`{"model":"MODEL","prompt":"spoof","max_tokens":2}`, "x-llmesh-class", "interactive")},
	{name: "wrong trusted marker is ignored", wantStatus: 200,
		req: completion(`{"model":"MODEL","prompt":"spoof","max_tokens":2}`, "x-llmesh-class", "interactive", "x-mesh-trusted", "guess")},
	{name: "unknown class header falls back", wantStatus: 200,
		req: completion(`{"model":"MODEL","prompt":"odd","max_tokens":2}`, "x-llmesh-class", "platinum", "x-mesh-trusted", "s3cret")},

	// Engine-priority guard (pool sim-guard, engine_priority: class).
	{name: "guard: untrusted priority replaced", wantStatus: 200,
		req: completion(`{"model":"MODEL","prompt":"prio","max_tokens":2,"priority":-100}`, "x-lane", "guard")},
	{name: "guard: priority added", wantStatus: 200,
		req: chat(`{"model":"MODEL","messages":[{"role":"user","content":"hi"}],"max_tokens":2,"stream":true}`, "x-lane", "guard", "x-tenant-id", "gold")},
	{name: "guard: trusted marker passes the body", wantStatus: 200,
		req: completion(`{"model":"MODEL","prompt":"prio","max_tokens":2,"priority":-3}`, "x-lane", "guard", "x-mesh-trusted", "s3cret")},
	{name: "guard: case-variant priority members", wantStatus: 200,
		req: completion(`{"model":"MODEL","prompt":"prio","max_tokens":2,"PRIORITY":-100,"Priority":-2}`, "x-lane", "guard")},
	{name: "guard: duplicate priority members", wantStatus: 200,
		req: completion(`{"model":"MODEL","prompt":"prio","max_tokens":2,"priority":-1,"priorit\u0079":-2}`, "x-lane", "guard")},

	// The guard refuses a body it cannot read reliably.
	{name: "guard: body not strict JSON refused", wantStatus: 400,
		req:    completion(`{"model":"MODEL","prompt":"prio","max_tokens":2,"priority":NaN}`, "x-lane", "guard"),
		differ: map[string]string{"Records[0].Outcome": guardAdmitted},
	},
	{name: "guard: malformed llm.v1 message refused", wantStatus: 200, wantGRPC: "3",
		req: func(string) request {
			return request{path: llmv1.Generation_Generate_FullMethodName, headers: hdrs(grpcCT), body: []byte{0, 0, 0, 0, 2, 0x1a, 0x09}}
		},
		differ: map[string]string{"Records[0].Outcome": guardAdmitted},
	},

	// Relocation.
	{name: "relocation: header prompt into the body", wantStatus: 200,
		req: completion(`{"model":"MODEL","max_tokens":3,"stream":true}`, "x-llmesh-prompt", longPrompt)},
	{name: "relocation: header prompt into chat messages", wantStatus: 200,
		req: chat(`{"model":"MODEL","messages":[{"role":"system","content":"be brief"}],"max_tokens":3}`, "x-llmesh-prompt", longPrompt)},
	// The relocated body meets the engine-priority guard (pool sim-guard):
	// the client's priority is replaced in the body the engine gets.
	{name: "relocation: relocated body is guarded", wantStatus: 200,
		req: completion(`{"model":"MODEL","max_tokens":2,"priority":-100}`, "x-lane", "guard", "x-llmesh-prompt", longPrompt)},
	{name: "relocation: short header stays", wantStatus: 200,
		req: completion(`{"model":"MODEL","prompt":"p","max_tokens":2}`, "x-llmesh-prompt", "short")},
	{name: "relocation: metadata prompt into llm.v1", wantStatus: 200, wantGRPC: "0",
		req: llm(&llmv1.GenerateRequest{Model: "MODEL", MaxTokens: 3}, "x-llmesh-prompt", longPrompt)},
	{name: "relocation: header over max", wantStatus: 413,
		req: completion(`{"model":"MODEL","max_tokens":3}`, "x-llmesh-prompt", strings.Repeat("x", 3000)),
	},
	{name: "relocation: metadata over max", wantStatus: 200, wantGRPC: "8",
		req: llm(&llmv1.GenerateRequest{Model: "MODEL", MaxTokens: 3}, "x-llmesh-prompt", strings.Repeat("x", 3000)),
	},
	{name: "relocation: body not JSON", wantStatus: 400,
		req: completion(`not json`, "x-llmesh-prompt", longPrompt),
	},

	// A pick made upstream by another endpoint picker (pool sim-picked,
	// accept_upstream_pick), in the x-gateway-destination-endpoint header.
	{name: "upstream pick honoured", wantStatus: 200,
		req: func(m string) request {
			return completion(`{"model":"MODEL","prompt":"picked","max_tokens":3,"stream":true}`, "x-lane", "picked", exchange.PickHeader, engineAddr)(m)
		}},
	{name: "upstream pick malformed", wantStatus: 400,
		req: completion(`{"model":"MODEL","prompt":"picked","max_tokens":2}`, "x-lane", "picked", exchange.PickHeader, "not-an-endpoint"),
		epp: map[string]string{"Client": eppIsThePicker, "Records": eppIsThePicker, "Engine": eppIsThePicker}},
	{name: "upstream pick outside the pool", wantStatus: 503,
		req: completion(`{"model":"MODEL","prompt":"picked","max_tokens":2}`, "x-lane", "picked", exchange.PickHeader, "127.0.0.1:1"),
		epp: map[string]string{"Client": eppIsThePicker, "Records": eppIsThePicker, "Engine": eppIsThePicker}},

	// Upstream errors and faults.
	{name: "upstream 429", wantStatus: 429,
		req: completion(`{"model":"MODEL","prompt":"p","max_tokens":2}`, fault, "429")},
	{name: "upstream 500", wantStatus: 500,
		req: completion(`{"model":"MODEL","prompt":"p","max_tokens":2,"stream":true}`, fault, "500")},
	{name: "upstream 503 on gRPC", wantStatus: 200, wantGRPC: "14",
		req: llm(&llmv1.GenerateRequest{Model: "MODEL", Prompt: "p", MaxTokens: 2}, fault, "503")},
	{name: "upstream rejects the body", wantStatus: 400,
		req: completion(`{"model":"MODEL","prompt":"p","max_tokens":"many"}`),
		epp: map[string]string{"Client.Body": eppParsesBody, "Records": eppParsesBody, "Engine": eppParsesBody}},
	{name: "upstream drops mid-stream", wantStatus: 200,
		req: completion(`{"model":"MODEL","prompt":"p","max_tokens":8,"stream":true}`, fault, "drop-after=2"),
		differ: map[string]string{
			"Client.Body":  "docs/architecture.md (request lifecycle): the gateway ends a broken stream with a clear error event; on Envoy the router resets the downstream when the upstream resets, with no filter callback in between",
			"Client.Reset": "see Client.Body",
		},
		epp: map[string]string{"Client.Body": eppUpstreamReset, "Client.Reset": eppUpstreamReset, "Records[0].Outcome": eppUpstreamReset, "Records[0].ErrorKind": eppUpstreamReset}},
	{name: "upstream stalls mid-stream", wantStatus: 200,
		req: completion(`{"model":"MODEL","prompt":"p","max_tokens":4,"stream":true}`, fault, "stall=5s"),
		differ: map[string]string{
			"Client.Body": "the gateway's stream idle timeout ends a stalled upstream; on Envoy that timeout is the router's (stream_idle_timeout), outside the filter, and the test's router has none",
			"Records[0]":  "see Client.Body",
		},
		epp: map[string]string{"Client.Body": eppNoIdleTimeout, "Records[0]": eppNoIdleTimeout}},

	// Client cancel.
	{name: "client cancels mid-stream", wantStatus: 200,
		req: func(m string) request {
			r := completion(`{"model":"MODEL","prompt":"p","max_tokens":8,"stream":true}`, fault, "stall=2s")(m)
			r.cancelAfter = 1
			return r
		}},

	{name: "client cancels mid-stream on gRPC", wantStatus: 200,
		req: func(m string) request {
			r := llm(&llmv1.GenerateRequest{Model: "MODEL", Prompt: "p", MaxTokens: 8, Sampling: &llmv1.SamplingParams{IgnoreEos: true}}, fault, "stall=2s")(m)
			r.cancelAfter = 1
			return r
		}},

	// Scheduling.
	{name: "queued behind a slot holder", scenario: queued, wantStatus: 200,
		req: completion(`{"model":"MODEL","prompt":"wait","max_tokens":2}`)},
	{name: "queued interactive stream", scenario: queued, wantStatus: 200,
		req: completion(`{"model":"MODEL","prompt":"wait","max_tokens":2,"stream":true}`, "x-tenant-id", "gold")},
	{name: "queued llm.v1 request", scenario: queued, wantStatus: 200, wantGRPC: "0",
		req: llm(&llmv1.GenerateRequest{Model: "MODEL", Prompt: "wait", MaxTokens: 2})},
	{name: "queue full", scenario: queueFull, wantStatus: 429,
		req:    completion(`{"model":"MODEL","prompt":"full","max_tokens":1}`, "x-tenant-id", "lim"),
		differ: map[string]string{"Records[1].Model": modelUnread},
	},
	{name: "max wait passed", scenario: queued, wantStatus: 503,
		req:    completion(`{"model":"MODEL","prompt":"impatient","max_tokens":1}`, "x-tenant-id", "imp"),
		differ: map[string]string{"Records[0].Model": modelUnread},
	},
	{name: "preempted mid-stream", scenario: preempted, wantStatus: 200,
		req: completion(`{"model":"MODEL","prompt":"a batch job","max_tokens":6,"stream":true,"stream_options":{"include_usage":true}}`, fault, "stall=2s"),
		differ: map[string]string{
			"Client":  "docs/architecture.md (request lifecycle): the gateway resumes a preempted stream by a continuation request; Envoy ends it (the stream is reset at the next callback)",
			"Records": "see Client: the gateway's Record is the resumed request's, Envoy's the preempted one's; on Envoy the slot is freed at the victim's next callback, so the preemptor waits for it",
			"Engine":  "see Client: the continuation request reaches the engine only from the gateway",
		},
		epp: map[string]string{"Client": eppPreemptSSE, "Records": eppPreemptSSE, "Engine": eppPreemptSSE}},
	{name: "preempted chat stream", scenario: preempted, wantStatus: 200,
		req: chat(`{"model":"MODEL","messages":[{"role":"user","content":"a batch chat"}],"max_tokens":6,"stream":true,"stream_options":{"include_usage":true}}`, fault, "stall=2s"),
		differ: map[string]string{
			"Client":  "docs/architecture.md (request lifecycle): the gateway resumes a preempted chat stream by a continuation request; Envoy ends it (the stream is reset at the next callback)",
			"Records": "see Client",
			"Engine":  "see Client",
		},
		epp: map[string]string{"Client": eppPreemptSSE, "Records": eppPreemptSSE, "Engine": eppPreemptSSE}},
	{name: "preempted llm.v1 stream", scenario: preempted, wantStatus: 200, wantGRPC: "14",
		req: llm(&llmv1.GenerateRequest{Model: "MODEL", Prompt: "a batch job", MaxTokens: 6, Sampling: &llmv1.SamplingParams{IgnoreEos: true}}, fault, "stall=2s"),
		differ: map[string]string{
			"Client.GRPCStatus":  "docs/architecture.md (request lifecycle): the gateway ends a preempted llm.v1 stream it does not continue with UNAVAILABLE trailers; Envoy cannot send a local reply after response headers (SDK: SendLocalReply resets the stream)",
			"Client.GRPCMessage": "see Client.GRPCStatus",
			"Client.Reset":       "see Client.GRPCStatus",
			"Records[1].Queued":  "on Envoy the victim's slot is freed at its next callback (docs/architecture.md, request lifecycle: preemption acts at the next EncodeData), so the preemptor waits for it; the gateway cancels the victim's upstream at once",
		},
		epp: map[string]string{"Client.GRPCStatus": eppPreemptGRPC, "Client.GRPCMessage": eppPreemptGRPC, "Client.Reset": eppPreemptGRPC}},
	{name: "client leaves while queued", scenario: cancelQueued,
		req:    completion(`{"model":"MODEL","prompt":"gone","max_tokens":2,"stream":true}`),
		differ: map[string]string{"Records[0].Model": modelUnread}},
	{name: "client leaves while queued on gRPC", scenario: cancelQueued,
		req:    llm(&llmv1.GenerateRequest{Model: "MODEL", Prompt: "gone", MaxTokens: 2}),
		differ: map[string]string{"Records[0].Model": modelUnread}},
	{name: "queue full on gRPC", scenario: queueFull, wantStatus: 200, wantGRPC: "8",
		req:    llm(&llmv1.GenerateRequest{Model: "MODEL", Prompt: "full", MaxTokens: 1}, "x-tenant-id", "lim"),
		differ: map[string]string{"Records[1].Model": modelUnread},
	},
	{name: "max wait passed on gRPC", scenario: queued, wantStatus: 200, wantGRPC: "14",
		req:    llm(&llmv1.GenerateRequest{Model: "MODEL", Prompt: "impatient", MaxTokens: 1}, "x-tenant-id", "imp"),
		differ: map[string]string{"Records[0].Model": modelUnread},
	},
}

// modelUnread: the Envoy host reads the model for the Record from the body
// as it passes after admission (without buffering it, unless the config
// needs it before admission: classification rules on the model, or token
// capacity); a request refused or cancelled while queued never hands its
// body to the filter. The gateway reads every body first. That is the
// SDK's doing, confirmed by the real SDK host, which shows the same empty
// Model on these rows: while Go holds the request headers (status
// Running, state ProcessingHeader) golang_filter.cc doData appends each
// decodeData chunk to the C++ data buffer (ProcessorState addBufferData)
// and returns StopIterationNoBuffer; Go gets the body only once it
// continues the headers, which a refused or cancelled request never does.
// Reading it before admission would mean buffering every body before
// queueing (StopAndBuffer in DecodeHeaders), a cost the filter takes only
// when the config needs the body.
const modelUnread = "the Envoy host reads the model from the body as it passes after admission; a request that ends while queued never hands it to the filter (golang_filter.cc doData buffers it in C++ while Go holds the headers), and the filter buffers a body before admission only when the config needs it; the gateway reads every body first"

// guardAdmitted: the Envoy host admits a request whose body it does not
// need for sizing from its headers, and checks the engine-priority guard
// on the body as it streams past (nothing buffered); a refused body then
// releases that admission as failed. The gateway reads the body before it
// admits, so its refusal was never admitted (Outcome done: nothing was
// released).
const guardAdmitted = "the Envoy host admits from the headers and checks the priority guard on the body as it streams, so a refusal releases an admission (failed); the gateway checks the body it has read before admitting (never admitted: done)"

// Differences of the endpoint picker host (tcase.epp).
const (
	eppParsesBody    = "the picker parses an OpenAI body to size the request before it admits it (exchange.ParseOpenAIRequest, docs/epp.md) and refuses one it cannot read with its own 400 message; the gateway refuses it in its relocation or guard, or leaves it to the engine"
	eppUpstreamReset = "an upstream reset makes Envoy reset the client and end the ext_proc stream with no message saying why, so the picker records the stream's end as the client gone (cancelled); the gateway ends the stream with an error event and records the reset"
	eppNoIdleTimeout = "the gateway's stream idle timeout ends a stalled upstream; behind the picker that timeout is Envoy's router's (stream_idle_timeout), and the test's router has none"
	eppPreemptSSE    = "docs/epp.md (Preemption): the gateway resumes a preempted stream by a continuation request; the picker cannot send a request again once its pick went out, so it ends the client's event stream with an error event at once (the Record is the preempted one's, and no continuation reaches the engine)"
	eppIsThePicker   = "by design: the picker is the endpoint picker; it makes the pick itself and overwrites x-gateway-destination-endpoint (docs/epp.md), so a pick in the incoming request is not read and the request is served by the picker's own pick; accept_upstream_pick is for the hosts behind another picker"
	eppPreemptGRPC   = "docs/epp.md (Preemption): the gateway ends a preempted llm.v1 stream with UNAVAILABLE trailers; the picker can change trailers only in its answer to Envoy's trailers message, so it sends an immediate response, which Envoy turns into a reset once response headers went out"
)
