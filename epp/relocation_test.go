package epp_test

import (
	"encoding/binary"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/llmesh/llmesh/api/llmv1"
	"github.com/llmesh/llmesh/epp"
	"github.com/llmesh/llmesh/epp/epptest"
	"github.com/llmesh/llmesh/testkit/grpcframe"
)

// relocated records the picker's OnRelocated calls.
type relocated struct {
	mu    sync.Mutex
	calls []string
}

func (r *relocated) on(kind string, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, kind+":"+itoa(n))
}

func (r *relocated) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.calls
	r.calls = nil
	return out
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

func startRelocating(t *testing.T) (*picker, *relocated) {
	t.Helper()
	rec := &relocated{}
	p := startPickerMesh(t, "testdata/mesh-relocation.yaml", func(c *epp.Config) { c.OnRelocated = rec.on })
	return p, rec
}

func jsonRequest(path, body string, kv ...string) epptest.Request {
	h := map[string]string{":method": "POST", ":path": path, "content-type": "application/json",
		"content-length": itoa(len(body))}
	for i := 0; i+1 < len(kv); i += 2 {
		h[kv[i]] = kv[i+1]
	}
	return epptest.Request{Headers: h, Chunks: split(body, 3)}
}

// prompt is a header prompt over the test mesh's 16-byte threshold, with
// characters JSON must escape.
const prompt = `a "long" prompt\that moves into the body`

// TestRelocationJSON: a header prompt over the threshold becomes the
// body's "prompt" (completions) or a user message appended to "messages"
// (chat), the header and content-length are removed, and OnRelocated
// hears of it, in full duplex (the body streamed back) and buffered (the
// body mutation) modes. In STREAMED mode, where the headers go upstream
// with their answer, the request is refused at its headers, before
// anything of it went on. A header under the threshold stays, the body as
// sent, in every mode.
func TestRelocationJSON(t *testing.T) {
	p, rec := startRelocating(t)
	cases := []struct {
		name, path, body string
		check            func(t *testing.T, got map[string]any)
	}{
		{"completions", "/v1/completions", `{"model":"m","max_tokens":2}`, func(t *testing.T, got map[string]any) {
			if got["prompt"] != prompt || got["model"] != "m" {
				t.Errorf("forwarded %v, want prompt %q", got, prompt)
			}
		}},
		{"chat", "/v1/chat/completions", `{"model":"m","messages":[{"role":"system","content":"be brief"}]}`, func(t *testing.T, got map[string]any) {
			msgs, _ := got["messages"].([]any)
			if len(msgs) != 2 {
				t.Fatalf("forwarded %v, want two messages", got)
			}
			last, _ := msgs[1].(map[string]any)
			if last["role"] != "user" || last["content"] != prompt {
				t.Errorf("appended message %v, want the user's prompt", last)
			}
		}},
	}
	for _, m := range modes {
		for _, c := range cases {
			t.Run(m.name+"/"+c.name, func(t *testing.T) {
				call, pick, err := p.driver(m.mode).Start(ctx(t), jsonRequest(c.path, c.body, "x-prompt", prompt))
				if err != nil {
					t.Fatal(err)
				}
				defer call.Cancel()
				if m.mode == epptest.Streamed {
					if pick.Immediate == nil || pick.Immediate.GetStatus().GetCode() != 500 ||
						!strings.Contains(string(pick.Immediate.GetBody()), "STREAMED") {
						t.Fatalf("streamed mode: %+v, want a 500 saying the prompt cannot be moved", pick)
					}
					if got := rec.take(); len(got) != 0 {
						t.Errorf("OnRelocated %q on a refused request", got)
					}
					return
				}
				if pick.Immediate != nil {
					t.Fatalf("refused: %s", pick.Immediate.GetBody())
				}
				var got map[string]any
				if err := json.Unmarshal(pick.Body, &got); err != nil {
					t.Fatalf("forwarded %q: %v", pick.Body, err)
				}
				c.check(t, got)
				if !slices.Contains(pick.Removed, "x-prompt") || !slices.Contains(pick.Removed, "content-length") {
					t.Errorf("removed headers %q, want x-prompt and content-length", pick.Removed)
				}
				if pick.Header != "10.0.0.1:8000" {
					t.Errorf("pick %q", pick.Header)
				}
				if got, want := rec.take(), []string{"http:" + itoa(len(prompt))}; !slices.Equal(got, want) {
					t.Errorf("OnRelocated %q, want %q", got, want)
				}
			})
		}
		t.Run(m.name+"/short header stays", func(t *testing.T) {
			const body = `{"model":"m","prompt":"p","max_tokens":2}`
			call, pick, err := p.driver(m.mode).Start(ctx(t), jsonRequest("/v1/completions", body, "x-prompt", "short"))
			if err != nil || pick.Immediate != nil {
				t.Fatalf("%v %+v", err, pick.Immediate)
			}
			defer call.Cancel()
			if string(pick.Body) != body || len(pick.Removed) > 0 {
				t.Errorf("forwarded %s removing %q, want the body and headers as sent", pick.Body, pick.Removed)
			}
		})
	}
}

// TestRelocationGRPC: metadata over the threshold is appended to an
// llm.v1 Generate message as field 2 (prompt) in the message streamed
// back, its length prefix fixed, the body split across chunks; the guard
// then writes the class priority into the same message.
func TestRelocationGRPC(t *testing.T) {
	p, rec := startRelocating(t)
	body := grpcframe.Message(&llmv1.GenerateRequest{Model: "llama-g", MaxTokens: 7, Priority: -5})
	h := map[string]string{":method": "POST", ":path": llmv1.Generation_Generate_FullMethodName,
		"content-type": "application/grpc", "te": "trailers", "x-prompt": prompt}
	for _, m := range []struct {
		name string
		mode epptest.Mode
	}{{"full_duplex", epptest.FullDuplex}, {"buffered", epptest.Buffered}} {
		t.Run(m.name, func(t *testing.T) {
			call, pick, err := p.driver(m.mode).Start(ctx(t), epptest.Request{Headers: h, Chunks: split(string(body), 4)})
			if err != nil || pick.Immediate != nil {
				t.Fatalf("%v %+v", err, pick.Immediate)
			}
			defer call.Cancel()
			if len(pick.Body) < 5 || int(binary.BigEndian.Uint32(pick.Body[1:5])) != len(pick.Body)-5 {
				t.Fatalf("forwarded %d bytes, not one gRPC frame", len(pick.Body))
			}
			var got llmv1.GenerateRequest
			if err := proto.Unmarshal(pick.Body[5:], &got); err != nil {
				t.Fatal(err)
			}
			if got.GetPrompt() != prompt || got.GetModel() != "llama-g" || got.GetMaxTokens() != 7 || got.GetPriority() != 10 {
				t.Errorf("forwarded %v, want the relocated prompt and the class priority 10", &got)
			}
			if !slices.Contains(pick.Removed, "x-prompt") {
				t.Errorf("removed headers %q, want x-prompt", pick.Removed)
			}
			if got, want := rec.take(), []string{"grpc:" + itoa(len(prompt))}; !slices.Equal(got, want) {
				t.Errorf("OnRelocated %q, want %q", got, want)
			}
			call.Cancel()
			if r := p.record(t); r.Model != "llama-g" || r.Pool != "grpc" {
				t.Errorf("record %+v, want model llama-g in pool grpc", r)
			}
		})
	}
}

// TestRelocationRefused: the relocation's refusals are the other hosts'
// (exchange.ReplyFor of relocate's errors), as an immediate response
// before any pick: a value over max (413; RESOURCE_EXHAUSTED for gRPC), a
// body that is not a JSON object (400), a prompt for a request without a
// body (400, as the Envoy filter host answers). In STREAMED mode a value
// that would move is refused at the headers (500) before the body is
// seen. A relocated "priority" meets the engine-priority guard like a
// client-sent one: stripped.
func TestRelocationRefused(t *testing.T) {
	p, _ := startRelocating(t)
	long := strings.Repeat("x", 5000)
	grpcReq := func(md string) epptest.Request {
		body := grpcframe.Message(&llmv1.GenerateRequest{Model: "m", MaxTokens: 2})
		return epptest.Request{Headers: map[string]string{":method": "POST", ":path": llmv1.Generation_Generate_FullMethodName,
			"content-type": "application/grpc", "x-prompt": md}, Chunks: [][]byte{body}}
	}
	cases := []struct {
		name       string
		req        epptest.Request
		status     int
		grpcStatus uint32
		body       string
	}{
		{"header over max", jsonRequest("/v1/completions", `{"model":"m"}`, "x-prompt", long), 413, 0, "relocation.http[0].max"},
		{"metadata over max", grpcReq(long), 413, 8, "relocation.grpc[0].max"},
		{"body not JSON", jsonRequest("/v1/completions", `not json`, "x-prompt", prompt), 400, 0, "llmesh"},
		{"no body", epptest.Request{Headers: map[string]string{":method": "GET", ":path": "/v1/models", "x-prompt": prompt}}, 400, 0, "no body"},
	}
	for _, m := range modes {
		for _, c := range cases {
			t.Run(m.name+"/"+c.name, func(t *testing.T) {
				if m.mode == epptest.Streamed && c.name == "body not JSON" {
					c.status, c.body = 500, "STREAMED"
				}
				call, pick, err := p.driver(m.mode).Start(ctx(t), c.req)
				if err != nil {
					t.Fatal(err)
				}
				defer call.Cancel()
				im := pick.Immediate
				if im == nil {
					t.Fatalf("picked %q, want a refusal", pick.Header)
				}
				if int(im.GetStatus().GetCode()) != c.status || im.GetGrpcStatus().GetStatus() != c.grpcStatus {
					t.Errorf("status %d grpc %d (%s), want %d grpc %d", im.GetStatus().GetCode(), im.GetGrpcStatus().GetStatus(), im.GetBody(), c.status, c.grpcStatus)
				}
				if !strings.Contains(string(im.GetBody()), c.body) && !strings.Contains(im.GetDetails(), c.body) {
					t.Errorf("reply %q (%s), want it to name %q", im.GetBody(), im.GetDetails(), c.body)
				}
				if r := p.record(t); r.Admitted {
					t.Errorf("record %+v: a refused request was admitted", r)
				}
			})
		}
	}
	t.Run("relocated priority is guarded", func(t *testing.T) {
		call, pick, err := p.driver(epptest.FullDuplex).Start(ctx(t), jsonRequest("/v1/completions", `{"model":"m","prompt":"p"}`, "x-prio", "-100"))
		if err != nil || pick.Immediate != nil {
			t.Fatalf("%v %+v", err, pick.Immediate)
		}
		defer call.Cancel()
		if got := string(pick.Body); strings.Contains(got, "priority") || strings.Contains(got, "-100") || !strings.Contains(got, `"prompt":"p"`) {
			t.Errorf("forwarded %s, want the priority stripped", got)
		}
	})
}
