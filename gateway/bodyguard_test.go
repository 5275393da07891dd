package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/llmesh/llmesh/api/llmv1"
	"github.com/llmesh/llmesh/exchange"
	"github.com/llmesh/llmesh/exchange/relocate"
	"github.com/llmesh/llmesh/sim/simtest"
)

func guardClassifier(t *testing.T, trusted string) *exchange.Classifier {
	t.Helper()
	c, err := exchange.NewClassifier(exchange.ClassifierConfig{
		Classes:             []exchange.Class{{Name: "interactive", Priority: 0}, {Name: "batch", Priority: 10}},
		DefaultClass:        "batch",
		PriorityHeader:      "x-llmesh-class",
		TrustedSources:      []netip.Prefix{netip.MustParsePrefix(trusted)},
		TrustedMarkerHeader: "x-mesh-trusted",
		TrustedMarkerValue:  "s3cret",
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The client is 127.0.0.1: trusted with the first, untrusted with the second.
const (
	trustLoopback = "127.0.0.1/32"
	trustOthers   = "10.0.0.0/8"
)

// TestBodyPrioritySpoofingHTTP: an OpenAI request's top-level "priority"
// reaches the engine only from a source trusted for priority; nested
// priority keys (a message's) always pass; streaming and non-streaming,
// completions and chat alike, through the gateway to the real sim.
func TestBodyPrioritySpoofingHTTP(t *testing.T) {
	sim := simtest.Start(t)
	eng := simtest.StartRecorder(t, sim.HTTPURL, false)
	g, gw := startGateway(t, Config{Pools: []Pool{{Name: "sim", Upstream: eng.URL}}})
	for _, tc := range []struct {
		name, trusted string
		headers       []string
		keep          bool
	}{
		{"untrusted peer", trustOthers, []string{"x-llmesh-class", "interactive"}, false},
		{"untrusted peer, forwarded-for names a trusted one", trustOthers, []string{"x-forwarded-for", "10.1.2.3", "x-real-ip", "10.1.2.3"}, false},
		{"untrusted peer, wrong marker", trustOthers, []string{"x-mesh-trusted", "guess"}, false},
		{"trusted peer", trustLoopback, nil, true},
		{"trusted marker", trustOthers, []string{"x-mesh-trusted", "s3cret"}, true},
	} {
		g.SetClassifier(guardClassifier(t, tc.trusted))
		for _, path := range []string{"/v1/completions", "/v1/chat/completions"} {
			for _, stream := range []bool{false, true} {
				name := tc.name + path
				if stream {
					name += " stream"
				}
				t.Run(name, func(t *testing.T) {
					req := map[string]any{"model": sim.Model, "max_tokens": 3, "stream": stream, "priority": -100}
					if strings.Contains(path, "chat") {
						req["messages"] = []map[string]any{{"role": "user", "content": "hi", "priority": -7}}
					} else {
						req["prompt"] = "hi"
					}
					body, err := json.Marshal(req)
					if err != nil {
						t.Fatal(err)
					}
					// A duplicate, escaped key: parsers that keep the last one
					// would see it.
					// Case variants: encoding/json reads them as the field.
					body = append(body[:len(body)-1], `,"priorit\u0079":-200,"PRIORITY":-300,"Priority":-400}`...)
					res := doJSON(t, gw+path, body, tc.headers...)
					got, _ := io.ReadAll(res.Body)
					res.Body.Close()
					if res.StatusCode != http.StatusOK {
						t.Fatalf("status %d: %s", res.StatusCode, got)
					}
					if stream && !bytes.Contains(got, []byte("data: [DONE]")) {
						t.Fatalf("stream did not finish: %s", got)
					}
					bodies := eng.Take(path)
					if len(bodies) != 1 {
						t.Fatalf("engine received %d requests", len(bodies))
					}
					if tc.keep {
						if !bytes.Equal(bodies[0], body) {
							t.Fatalf("trusted body changed:\nsent %s\ngot  %s", body, bodies[0])
						}
						return
					}
					var m map[string]json.RawMessage
					if err := json.Unmarshal(bodies[0], &m); err != nil {
						t.Fatal(err)
					}
					if p, ok := m["priority"]; ok {
						t.Fatalf("engine received priority %s from an untrusted client: %s", p, bodies[0])
					}
					var eng struct {
						P *json.RawMessage `json:"priority"`
					}
					if err := json.Unmarshal(bodies[0], &eng); err != nil || eng.P != nil {
						t.Fatalf("encoding/json reads a priority (%v) from an untrusted client's body: %s", err, bodies[0])
					}
					if strings.Contains(path, "chat") && !bytes.Contains(bodies[0], []byte(`"priority":-7`)) {
						t.Errorf("the message's own priority key was removed: %s", bodies[0])
					}
					if string(m["max_tokens"]) != "3" || string(m["stream"]) != map[bool]string{true: "true", false: "false"}[stream] {
						t.Errorf("other fields changed: %s", bodies[0])
					}
				})
			}
		}
	}
}

func doJSON(t *testing.T, url string, body []byte, headers ...string) *http.Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestBodyPrioritySpoofingGRPC: llm.v1.GenerateRequest.priority from an
// untrusted client reaches the sim as 0 (unset), from a trusted one as
// sent; the gRPC stream completes either way.
func TestBodyPrioritySpoofingGRPC(t *testing.T) {
	sim := simtest.Start(t)
	eng := simtest.StartRecorder(t, "http://"+sim.GRPCAddr, true)
	g, gw := startGateway(t, Config{Pools: []Pool{{Name: "sim", Protocol: GRPC, Upstream: eng.URL}}})
	client := grpcClient(t, gw)
	for _, tc := range []struct {
		name, trusted string
		md            []string
		want          int32
	}{
		{"untrusted peer", trustOthers, []string{"x-llmesh-class", "interactive"}, 0},
		{"untrusted peer, wrong marker", trustOthers, []string{"x-mesh-trusted", "guess"}, 0},
		{"trusted peer", trustLoopback, nil, -100},
		{"trusted marker", trustOthers, []string{"x-mesh-trusted", "s3cret"}, -100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g.SetClassifier(guardClassifier(t, tc.trusted))
			generateFour(t, client, eng, sim.Model, -100, tc.want, tc.md...)
		})
	}
}

// TestBodyPriorityUnreadableRefused: from an untrusted source, a JSON body
// the gateway cannot read with certainty (and a compressed one) is refused
// before it reaches the engine, naming the problem; a non-JSON body and
// other gRPC methods pass untouched.
func TestBodyPriorityUnreadableRefused(t *testing.T) {
	sim := simtest.Start(t)
	eng := simtest.StartRecorder(t, sim.HTTPURL, false)
	_, gw := startGateway(t, Config{Pools: []Pool{{Name: "sim", Upstream: eng.URL}}},
		WithClassifier(guardClassifier(t, trustOthers)))
	for _, tc := range []struct {
		name, body string
		headers    []string
		status     int
		msg        string
	}{
		{"NaN priority", `{"model":"m","prompt":"x","priority":NaN}`, nil, 400, "invalid JSON at byte 37: unexpected character 'N'"},
		{"trailing data", `{"model":"m","prompt":"x"} {"priority":-1}`, nil, 400, "data after the top-level value"},
		{"gzip body", "\x1f\x8b\x08\x00", []string{"Content-Encoding", "gzip"}, 415, "content-encoding gzip"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := doJSON(t, gw+"/v1/completions", []byte(tc.body), tc.headers...)
			got, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != tc.status || !strings.Contains(string(got), tc.msg) {
				t.Fatalf("status %d %s, want %d containing %q", res.StatusCode, got, tc.status, tc.msg)
			}
			if n := len(eng.Take("/v1/completions")); n != 0 {
				t.Fatalf("engine received %d requests", n)
			}
		})
	}
	// text/plain is not read as JSON by OpenAI servers: it passes as sent
	// (the sim refuses it, as vLLM would).
	req, err := http.NewRequest(http.MethodPost, gw+"/v1/completions", strings.NewReader(`{"priority":NaN}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "text/plain")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if b := eng.Take("/v1/completions"); len(b) != 1 || string(b[0]) != `{"priority":NaN}` {
		t.Fatalf("engine received %q", b)
	}
}

// TestBodyPriorityGRPCRefusals: a compressed message in an encoding the
// gateway cannot read, and a malformed message, are refused with
// INVALID_ARGUMENT before the engine sees them.
func TestBodyPriorityGRPCRefusals(t *testing.T) {
	sim := simtest.Start(t)
	eng := simtest.StartRecorder(t, "http://"+sim.GRPCAddr, true)
	_, gw := startGateway(t, Config{Pools: []Pool{{Name: "sim", Protocol: GRPC, Upstream: eng.URL}}},
		WithClassifier(guardClassifier(t, trustOthers)))
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	c := &http.Client{Timeout: time.Minute, Transport: &http.Transport{Protocols: &protos}}
	defer c.CloseIdleConnections()
	for _, tc := range []struct {
		name, enc string
		body      []byte
		msg       string
	}{
		{"deflate", "deflate", []byte{1, 0, 0, 0, 2, 0x30, 0x01}, `grpc-encoding "deflate"`},
		{"malformed message", "", []byte{0, 0, 0, 0, 2, 0x32, 0x7f}, "protobuf field 6"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodPost, gw+llmv1.Generation_Generate_FullMethodName, bytes.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/grpc")
			req.Header.Set("TE", "trailers")
			if tc.enc != "" {
				req.Header.Set("Grpc-Encoding", tc.enc)
			}
			res, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			code, msg := res.Header.Get("Grpc-Status"), res.Header.Get("Grpc-Message")
			if code == "" {
				code, msg = res.Trailer.Get("Grpc-Status"), res.Trailer.Get("Grpc-Message")
			}
			if code != "3" || !strings.Contains(msg, tc.msg) {
				t.Fatalf("grpc-status %s %q, want 3 containing %q", code, msg, tc.msg)
			}
			if n := len(eng.Take(llmv1.Generation_Generate_FullMethodName)); n != 0 {
				t.Fatalf("engine received %d requests", n)
			}
		})
	}
}

// TestBodyPriorityAfterRelocation: a relocation rule that writes a header
// into the body's "priority" field cannot bring a priority back: the guard
// runs on the relocated body (the sim would refuse the string value).
func TestBodyPriorityAfterRelocation(t *testing.T) {
	sim := simtest.Start(t)
	eng := simtest.StartRecorder(t, sim.HTTPURL, false)
	rel, err := relocate.Compile(relocate.Config{HTTP: []relocate.HTTPRule{{Header: "x-prio", Field: "priority", Threshold: relocate.Threshold{Bytes: 1}}}})
	if err != nil {
		t.Fatal(err)
	}
	_, gw := startGateway(t, Config{Pools: []Pool{{Name: "sim", Upstream: eng.URL}}},
		WithClassifier(guardClassifier(t, trustOthers)),
		WithRelocation(rel, nil))
	res := doJSON(t, gw+"/v1/completions", []byte(`{"model":"`+sim.Model+`","prompt":"hi","max_tokens":2}`), "x-prio", "-100")
	got, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", res.StatusCode, got)
	}
	b := eng.Take("/v1/completions")
	if len(b) != 1 || bytes.Contains(b[0], []byte("priority")) || bytes.Contains(b[0], []byte("-100")) {
		t.Fatalf("engine received %q", b)
	}
}

// generateFour streams a 4-token llm.v1 Generate with priority sent and
// metadata md through client, and checks that the engine behind eng
// received the request once, with priority want and the rest unchanged.
func generateFour(t *testing.T, client llmv1.GenerationClient, eng *simtest.Recorder, model string, sent, want int32, md ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, md...)
	st, err := client.Generate(ctx, &llmv1.GenerateRequest{Model: model, Prompt: "hi", MaxTokens: 4, Priority: sent,
		Sampling: &llmv1.SamplingParams{IgnoreEos: true}})
	if err != nil {
		t.Fatal(err)
	}
	tokens := 0
	for {
		r, err := st.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		tokens += len(r.GetTokenIds())
	}
	if tokens != 4 {
		t.Errorf("%d tokens, want 4", tokens)
	}
	bodies := eng.Take(llmv1.Generation_Generate_FullMethodName)
	if len(bodies) != 1 || len(bodies[0]) < 5 {
		t.Fatalf("engine received %d requests", len(bodies))
	}
	var got llmv1.GenerateRequest
	if err := proto.Unmarshal(bodies[0][5:], &got); err != nil {
		t.Fatal(err)
	}
	if got.GetPriority() != want || got.GetPrompt() != "hi" || got.GetMaxTokens() != 4 {
		t.Errorf("engine received %v, want priority %d", &got, want)
	}
}
