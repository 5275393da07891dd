package gateway

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/exchange"
	"github.com/llmesh/llmesh/sim"
	"github.com/llmesh/llmesh/sim/simtest"
)

// classPriorityClassifier: gold -5, bulk 7 (the default); the client
// 127.0.0.1 is trusted with trustLoopback, not with trustOthers.
func classPriorityClassifier(t *testing.T, trusted string) *exchange.Classifier {
	t.Helper()
	c, err := exchange.NewClassifier(exchange.ClassifierConfig{
		Classes:             []exchange.Class{{Name: "gold", Priority: -5}, {Name: "bulk", Priority: 7}},
		DefaultClass:        "bulk",
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

// TestBodyPriorityClassHTTP: for a pool with ClassPriority, the engine (the
// real sim scheduling by priority) receives the request's class priority
// as the body's only top-level "priority", whatever an untrusted client
// sent or left out; a trusted client's body passes byte for byte;
// streaming and not, completions and chat.
func TestBodyPriorityClassHTTP(t *testing.T) {
	s := simtest.Start(t, simtest.WithEngine(sim.Config{Policy: sim.Priority}))
	eng := simtest.StartRecorder(t, s.HTTPURL, false)
	g, gw := startGateway(t, Config{
		Pools:  []Pool{{Name: "sim", Upstream: eng.URL, ClassPriority: true}},
		Routes: []Route{{PathPrefix: "/v1/chat/", Pool: "sim", Class: "gold"}, {Pool: "sim"}},
	})
	for _, tc := range []struct {
		name, trusted string
		headers       []string
		sent          string // the client's priority member, "" for none
		want          string // the engine's priority, "" for the body as sent
	}{
		{"untrusted, priority sent", trustOthers, []string{"x-llmesh-class", "gold"}, `"priority":-100,"priorit\u0079":-200`, "class"},
		{"untrusted, case variants", trustOthers, nil, `"PRIORITY":-100,"Priority":-200`, "class"},
		{"untrusted, no priority", trustOthers, nil, "", "class"},
		{"untrusted, string priority", trustOthers, nil, `"priority":"-9"`, "class"},
		{"trusted peer", trustLoopback, nil, `"priority":-100`, ""},
		{"trusted marker", trustOthers, []string{"x-mesh-trusted", "s3cret"}, `"priority":-100`, ""},
	} {
		g.SetClassifier(classPriorityClassifier(t, tc.trusted))
		for _, path := range []string{"/v1/completions", "/v1/chat/completions"} {
			for _, stream := range []bool{false, true} {
				name := tc.name + path
				if stream {
					name += " stream"
				}
				t.Run(name, func(t *testing.T) {
					body := `{"model":"` + s.Model + `","max_tokens":3,"stream":` + map[bool]string{true: "true", false: "false"}[stream]
					if strings.Contains(path, "chat") {
						body += `,"messages":[{"role":"user","content":"hi","priority":-7}]`
					} else {
						body += `,"prompt":"hi"`
					}
					if tc.sent != "" {
						body += "," + tc.sent
					}
					body += "}"
					res := doJSON(t, gw+path, []byte(body), tc.headers...)
					got, _ := io.ReadAll(res.Body)
					res.Body.Close()
					if res.StatusCode != http.StatusOK {
						t.Fatalf("status %d: %s", res.StatusCode, got)
					}
					if stream && !bytes.Contains(got, []byte("data: [DONE]")) {
						t.Fatalf("stream did not finish: %s", got)
					}
					if !stream && !bytes.Contains(got, []byte(`"completion_tokens":3`)) {
						t.Fatalf("not 3 tokens: %s", got)
					}
					bodies := eng.Take(path)
					if len(bodies) != 1 {
						t.Fatalf("engine received %d requests", len(bodies))
					}
					if tc.want == "" {
						if string(bodies[0]) != body {
							t.Fatalf("trusted body changed:\nsent %s\ngot  %s", body, bodies[0])
						}
						return
					}
					want := "7" // bulk, the default class
					if strings.Contains(path, "chat") {
						want = "-5" // the route's class
					}
					if n := bytes.Count(bodies[0], []byte(`"priorit`)); n != 1+strings.Count(path, "chat") {
						t.Errorf("%d priority keys, want one top-level (and the message's): %s", n, bodies[0])
					}
					var m map[string]json.RawMessage
					if err := json.Unmarshal(bodies[0], &m); err != nil {
						t.Fatal(err)
					}
					if string(m["priority"]) != want {
						t.Errorf("engine received priority %s, want %s: %s", m["priority"], want, bodies[0])
					}
					// What a Go engine reads: encoding/json matches keys
					// case-insensitively and keeps the last match.
					var eng struct {
						P json.RawMessage `json:"priority"`
					}
					if err := json.Unmarshal(bodies[0], &eng); err != nil || string(eng.P) != want {
						t.Errorf("encoding/json reads priority %s (%v), want %s: %s", eng.P, err, want, bodies[0])
					}
					if strings.Contains(path, "chat") && !bytes.Contains(bodies[0], []byte(`"priority":-7`)) {
						t.Errorf("the message's own priority key changed: %s", bodies[0])
					}
					if string(m["max_tokens"]) != "3" || string(m["model"]) != `"`+s.Model+`"` {
						t.Errorf("other fields changed: %s", bodies[0])
					}
				})
			}
		}
	}
}

// TestBodyPriorityClassGRPC: llm.v1.GenerateRequest.priority reaches the
// sim as the class's priority from an untrusted client (set or not), as
// sent from a trusted one.
func TestBodyPriorityClassGRPC(t *testing.T) {
	s := simtest.Start(t, simtest.WithEngine(sim.Config{Policy: sim.Priority}))
	eng := simtest.StartRecorder(t, "http://"+s.GRPCAddr, true)
	g, gw := startGateway(t, Config{Pools: []Pool{{Name: "sim", Protocol: GRPC, Upstream: eng.URL, ClassPriority: true}}})
	client := grpcClient(t, gw)
	for _, tc := range []struct {
		name, trusted string
		md            []string
		sent, want    int32
	}{
		{"untrusted", trustOthers, []string{"x-llmesh-class", "gold"}, -100, 7},
		{"untrusted, no priority", trustOthers, nil, 0, 7},
		{"trusted peer picks gold", trustLoopback, []string{"x-llmesh-class", "gold"}, -100, -100},
		{"trusted marker", trustOthers, []string{"x-mesh-trusted", "s3cret"}, 3, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g.SetClassifier(classPriorityClassifier(t, tc.trusted))
			generateFour(t, client, eng, s.Model, tc.sent, tc.want, tc.md...)
		})
	}
}

// TestConfigFromMeshClassPriority: engine_priority: class reaches the
// gateway pool and its experiment arms; strip (the default) does not.
func TestConfigFromMeshClassPriority(t *testing.T) {
	c, err := config.Load([]byte(`
listeners: [{name: main, address: "127.0.0.1:0", routes: [{pool: prio}]}]
pools:
  - {name: prio, protocol: openai, endpoints: ["127.0.0.1:1"], engine_priority: class}
  - {name: fcfs, protocol: grpc, endpoints: ["127.0.0.1:2"]}
experiments: [{name: ab, pool: prio, arms: [{name: a, weight: 1}]}]
`))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := ConfigFromMesh(c, "")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"prio": true, config.ArmPoolName("prio", "a"): true, "fcfs": false}
	for _, p := range cfg.Pools {
		if w, ok := want[p.Name]; !ok || p.ClassPriority != w {
			t.Errorf("pool %q: ClassPriority %v, want %v", p.Name, p.ClassPriority, w)
		}
		delete(want, p.Name)
	}
	if len(want) != 0 {
		t.Errorf("pools missing: %v", want)
	}
}
