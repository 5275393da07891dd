package epp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/llmesh/llmesh/clock"
	"github.com/llmesh/llmesh/epp"
	"github.com/llmesh/llmesh/epp/epptest"
	"github.com/llmesh/llmesh/sim/server"
	"github.com/llmesh/llmesh/sim/simtest"
	"github.com/llmesh/llmesh/testkit/proctest"
	"github.com/llmesh/llmesh/testkit/wait"
)

// The cross-implementation conformance suite: the suite's data-plane cases,
// black box (only what a gateway sees on the ext_proc stream and the health
// service), run against llmesh's picker and against llm-d's endpoint picker
// (the binary named by LLMD_EPP_BIN, built by scripts/llmd-epp/build.sh,
// with file-based endpoint discovery), both picking between the same two
// real sims. A case an implementation fails by its design is a declared
// difference whose own check asserts the differing behaviour: the row fails
// when that behaviour changes, so a declared difference is run, not skipped.
// docs/results/epp-conformance.md publishes the table.

var crossTable = flag.String("epp.table", "", "write the cross-implementation conformance table (markdown) to this file")

// eppTarget is one picker implementation under the suite.
type eppTarget struct {
	client extprocv3.ExternalProcessorClient
	health healthpb.HealthClient
	// eps are the two sims' host:port, as a pick names them; model is the
	// sims' model.
	eps   [2]string
	model string
	// queued, when set, is the number of requests of a class waiting in the
	// picker; settle, when set, waits until the picker holds no request.
	queued func(class string) int
	settle func(t *testing.T)
}

func (tg *eppTarget) driver(m epptest.Mode) *epptest.Driver {
	return &epptest.Driver{Client: tg.client, RequestMode: m, ResponseMode: m}
}

// body is a streaming chat request for the sims' model.
func (tg *eppTarget) body() string {
	return fmt.Sprintf(`{"model":%q,"stream":true,"stream_options":{"include_usage":true},"max_tokens":12,`+
		`"messages":[{"role":"user","content":"hello there"}]}`, tg.model)
}

func (tg *eppTarget) request(extra map[string]string, chunks int) epptest.Request {
	h := map[string]string{":method": "POST", ":path": "/v1/chat/completions", "content-type": "application/json"}
	for k, v := range extra {
		h[k] = v
	}
	return epptest.Request{Headers: h, Chunks: split(tg.body(), chunks)}
}

// crossCase is one row of the table. run asserts what the suite requires;
// differs declares, per implementation, a difference by design and the
// check that asserts that implementation's behaviour instead.
type crossCase struct {
	name    string
	run     func(t *testing.T, tg *eppTarget)
	differs map[string]difference
}

type difference struct {
	why   string
	check func(t *testing.T, tg *eppTarget)
}

const (
	implLlmesh = "llmesh epp"
	implLlmd   = "llm-d EPP"
)

// llmdFullDuplexOnly: llm-d's handler (pkg/epp/handlers/server.go of
// llm-d-router) answers the request headers only once the body has ended,
// whatever the processing mode: the FULL_DUPLEX_STREAMED order.
var llmdFullDuplexOnly = difference{
	why: "speaks only FULL_DUPLEX_STREAMED: it answers the request headers after the body's end, and Envoy in this mode waits for that answer before sending the body (no answer within 2 s)",
	check: func(t *testing.T, tg *eppTarget) {
		for _, m := range []epptest.Mode{epptest.Buffered, epptest.Streamed} {
			c, cancel := context.WithTimeout(ctx(t), 2*time.Second)
			_, pick, err := tg.driver(m).Start(c, tg.request(nil, 1))
			cancel()
			if status.Code(err) != codes.DeadlineExceeded || pick.Header != "" || pick.Immediate != nil {
				t.Fatalf("%v: want no answer to the request headers, got %+v (%v)", m, pick, err)
			}
		}
	},
}

// llmdNoAdmission: llm-d admits by saturation read from the engines'
// metrics, with no per-pool in-flight limit; flow control (a feature gate,
// off by default) orders by the priority of InferenceObjective objects,
// which file discovery has no API server to read.
var llmdNoAdmission = difference{
	why: "no in-flight limit or class queue: it admits by engine saturation from metrics; flow control (off by default) orders by InferenceObjective priority, which file discovery cannot read: the third request is picked at once",
	check: func(t *testing.T, tg *eppTarget) {
		d := tg.driver(epptest.FullDuplex)
		for i := 0; i < 3; i++ {
			c, cancel := context.WithTimeout(ctx(t), 2*time.Second)
			call, pick, err := d.Start(c, tg.request(map[string]string{epp.ObjectiveHeader: "batch"}, 1))
			if err != nil || pick.Header == "" {
				cancel()
				t.Fatalf("request %d with %d held: %v %+v", i+1, i, err, pick)
			}
			defer call.Cancel()
			defer cancel()
		}
	},
}

var crossCases = []crossCase{
	{name: "pick in the header and the metadata, one value, body streamed back byte for byte", run: func(t *testing.T, tg *eppTarget) {
		crossPickBody(t, tg, 1, tg.body(), exactBody)
	}, differs: map[string]difference{implLlmd: llmdReencodes(1, "")}},
	{name: "request without a body picked on the headers answer (each body mode)", run: func(t *testing.T, tg *eppTarget) {
		for _, m := range modes {
			r := epptest.Request{Headers: map[string]string{":method": "GET", ":path": "/v1/models"}}
			call, pick, err := tg.driver(m.mode).Start(ctx(t), r)
			mustPick(t, tg, pick, err)
			if _, err := call.Respond(epptest.Response{Status: 200}); err != nil {
				t.Fatalf("%s: %v", m.name, err)
			}
		}
	}},
	{name: "body split across 5 chunks parsed whole and streamed back byte for byte", run: func(t *testing.T, tg *eppTarget) {
		crossPickBody(t, tg, 5, tg.body(), exactBody)
	}, differs: map[string]difference{implLlmd: llmdReencodes(5, "")}},
	{name: "BUFFERED and STREAMED body modes: pick on the body answer", run: func(t *testing.T, tg *eppTarget) {
		for _, m := range []epptest.Mode{epptest.Buffered, epptest.Streamed} {
			call, pick, err := tg.driver(m).Start(ctx(t), tg.request(nil, 3))
			mustPick(t, tg, pick, err)
			call.Cancel()
		}
	}, differs: map[string]difference{implLlmd: llmdFullDuplexOnly}},
	{name: "subset honoured", run: func(t *testing.T, tg *eppTarget) {
		for i := 0; i < 4; i++ {
			r := tg.request(nil, 1)
			r.Subset, r.SubsetSet = []string{tg.eps[1]}, true
			call, pick, err := tg.driver(epptest.FullDuplex).Start(ctx(t), r)
			mustPick(t, tg, pick, err)
			if pick.Header != tg.eps[1] {
				t.Fatalf("picked %s outside the subset [%s]", pick.Header, tg.eps[1])
			}
			call.Cancel()
		}
	}},
	{name: "subset with no endpoint of the pool: 503", run: func(t *testing.T, tg *eppTarget) {
		mustRefuse(t, tg, []string{"10.9.9.9:1"}, 503)
	}},
	{name: "subset naming a pool endpoint's address with another port: 503", run: func(t *testing.T, tg *eppTarget) {
		host, _, _ := net.SplitHostPort(tg.eps[0])
		mustRefuse(t, tg, []string{net.JoinHostPort(host, "1")}, 503)
	}, differs: map[string]difference{implLlmd: {
		why: "matches subset entries by address alone, the port ignored (pkg/epp/requestcontrol/candidates.go): it picks the pool's endpoint at that address",
		check: func(t *testing.T, tg *eppTarget) {
			host, _, _ := net.SplitHostPort(tg.eps[0])
			r := tg.request(nil, 1)
			r.Subset, r.SubsetSet = []string{net.JoinHostPort(host, "1")}, true
			call, pick, err := tg.driver(epptest.FullDuplex).Start(ctx(t), r)
			mustPick(t, tg, pick, err)
			if pick.Header != tg.eps[0] {
				t.Fatalf("picked %s, want %s (the endpoint at the subset's address)", pick.Header, tg.eps[0])
			}
			call.Cancel()
		},
	}}},
	{name: "empty subset: 503", run: func(t *testing.T, tg *eppTarget) {
		mustRefuse(t, tg, []string{}, 503)
	}},
	{name: "malformed subset element (no port): 400", run: func(t *testing.T, tg *eppTarget) {
		mustRefuse(t, tg, []string{"127.0.0.1"}, 400)
	}, differs: map[string]difference{implLlmd: {
		why: "an element without a port is taken as an address (pkg/epp/requestcontrol/candidates.go): it picks the pool's endpoint at 127.0.0.1",
		check: func(t *testing.T, tg *eppTarget) {
			r := tg.request(nil, 1)
			r.Subset, r.SubsetSet = []string{"127.0.0.1"}, true
			call, pick, err := tg.driver(epptest.FullDuplex).Start(ctx(t), r)
			mustPick(t, tg, pick, err)
			if pick.Header != tg.eps[0] {
				t.Fatalf("picked %s, want %s (the endpoint at 127.0.0.1)", pick.Header, tg.eps[0])
			}
			call.Cancel()
		},
	}}},
	{name: "unparsable OpenAI body: 400", run: func(t *testing.T, tg *eppTarget) {
		r := tg.request(nil, 1)
		r.Chunks = [][]byte{[]byte(`{"model":`)}
		_, pick, err := tg.driver(epptest.FullDuplex).Start(ctx(t), r)
		if err != nil || pick.Immediate.GetStatus().GetCode() != 400 {
			t.Fatalf("want an immediate 400, got %+v (%v)", pick, err)
		}
	}},
	{name: "queueing by class: interactive admitted before an earlier batch request", run: func(t *testing.T, tg *eppTarget) {
		crossQueueing(t, tg)
	}, differs: map[string]difference{implLlmd: llmdNoAdmission}},
	{name: "full class queue: 429 with retry-after", run: func(t *testing.T, tg *eppTarget) {
		d := tg.driver(epptest.FullDuplex)
		for i := 0; i < 2; i++ {
			call, pick, err := d.Start(ctx(t), tg.request(nil, 1))
			mustPick(t, tg, pick, err)
			defer call.Cancel()
		}
		qctx, cancel := context.WithCancel(ctx(t))
		defer cancel()
		go func() { _, _, _ = d.Start(qctx, tg.request(map[string]string{epp.ObjectiveHeader: "batch"}, 1)) }()
		wait.Until(t, "batch queued", func() bool { return queued(t, tg, "batch") == 1 })
		_, pick, err := d.Start(ctx(t), tg.request(map[string]string{epp.ObjectiveHeader: "batch"}, 1))
		im := pick.Immediate
		if err != nil || im.GetStatus().GetCode() != 429 {
			t.Fatalf("want an immediate 429, got %+v (%v)", pick, err)
		}
		if !slices.ContainsFunc(im.GetHeaders().GetSetHeaders(), func(h *corev3.HeaderValueOption) bool { return h.GetHeader().GetKey() == "retry-after" }) {
			t.Fatal("429 without retry-after")
		}
	}, differs: map[string]difference{implLlmd: llmdNoAdmission}},
	{name: "SSE response split mid-event streamed back unchanged", run: func(t *testing.T, tg *eppTarget) {
		call, pick, err := tg.driver(epptest.FullDuplex).Start(ctx(t), tg.request(nil, 1))
		mustPick(t, tg, pick, err)
		body := sse(7)
		got, err := call.Respond(epptest.Response{Status: 200, Headers: map[string]string{"content-type": "text/event-stream"},
			Chunks: split(body, 9), Served: pick.Header})
		if err != nil || string(got) != body {
			t.Fatalf("client got %q (%v), want %q", got, err, body)
		}
	}},
	{name: "end to end: request sent to the picked sim, its stream relayed, bytes unchanged", run: func(t *testing.T, tg *eppTarget) {
		for i := 0; i < 4; i++ {
			call, pick, err := tg.driver(epptest.FullDuplex).Start(ctx(t), tg.request(nil, 3))
			mustPick(t, tg, pick, err)
			resp, err := http.Post("http://"+pick.Header+"/v1/chat/completions", "application/json", bytes.NewReader(pick.Body))
			if err != nil {
				t.Fatal(err)
			}
			sent, chunks := readChunks(t, resp.Body)
			got, err := call.Respond(epptest.Response{Status: resp.StatusCode,
				Headers: map[string]string{"content-type": resp.Header.Get("content-type")}, Chunks: chunks, Served: pick.Header})
			if err != nil || !bytes.Equal(got, sent) {
				t.Fatalf("client got %d bytes (%v), the sim sent %d", len(got), err, len(sent))
			}
			if !strings.Contains(string(sent), "[DONE]") {
				t.Fatalf("the sim's stream did not end: %q", sent)
			}
		}
	}},
	{name: "a 5 MiB body in 40 chunks streamed back byte for byte", run: func(t *testing.T, tg *eppTarget) {
		crossPickBody(t, tg, 40, bigBody(tg), exactBody)
	}, differs: map[string]difference{implLlmd: llmdReencodes(40, "big")}},
	{name: "gRPC health: \"\", liveness, readiness and the ext_proc service SERVING", run: func(t *testing.T, tg *eppTarget) {
		for _, svc := range []string{"", "liveness", "readiness", extprocv3.ExternalProcessor_ServiceDesc.ServiceName} {
			r, err := tg.health.Check(ctx(t), &healthpb.HealthCheckRequest{Service: svc})
			if err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
				t.Fatalf("%q: %v (%v)", svc, r.GetStatus(), err)
			}
		}
	}},
}

// bigBody is a 5 MiB completions request: larger than gRPC's default 4 MiB
// message.
func bigBody(tg *eppTarget) string {
	return fmt.Sprintf(`{"model":%q,"prompt":"%s","max_tokens":1}`, tg.model, strings.Repeat("x", 5<<20))
}

// crossPickBody sends body in chunks pieces in full duplex mode and checks the
// pick and the body the picker streams back with same.
func crossPickBody(t *testing.T, tg *eppTarget, chunks int, body string, same func(t *testing.T, got, want []byte)) {
	t.Helper()
	path := "/v1/chat/completions"
	if !strings.Contains(body, `"messages"`) {
		path = "/v1/completions"
	}
	r := epptest.Request{Headers: map[string]string{":method": "POST", ":path": path, "content-type": "application/json"},
		Chunks: split(body, chunks)}
	call, pick, err := tg.driver(epptest.FullDuplex).Start(ctx(t), r)
	mustPick(t, tg, pick, err)
	defer call.Cancel()
	same(t, pick.Body, []byte(body))
}

func exactBody(t *testing.T, got, want []byte) {
	t.Helper()
	if !bytes.Equal(got, want) {
		t.Fatalf("forwarded body of %d bytes differs from the client's %d (%.120q)", len(got), len(want), got)
	}
}

// llmdReencodes: llm-d parses the body into its request type and
// marshals it again before streaming it back (pkg/epp/requestcontrol's
// director, then envoy.GenerateRequestBodyResponses): the same JSON, its
// object keys in sorted order, not the client's bytes.
func llmdReencodes(chunks int, which string) difference {
	return difference{
		why: "streams back its own re-encoding of the JSON body (keys sorted): the engine gets equal JSON, not the client's bytes",
		check: func(t *testing.T, tg *eppTarget) {
			body := tg.body()
			if which == "big" {
				body = bigBody(tg)
			}
			crossPickBody(t, tg, chunks, body, func(t *testing.T, got, want []byte) {
				var g, w any
				if err := json.Unmarshal(got, &g); err != nil {
					t.Fatalf("forwarded body is not JSON: %v", err)
				}
				if err := json.Unmarshal(want, &w); err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(g, w) {
					t.Fatalf("forwarded JSON differs from the client's: %.200q", got)
				}
				if bytes.Equal(got, want) {
					t.Fatal("forwarded the client's bytes unchanged: the declared difference is gone")
				}
			})
		},
	}
}

// crossQueueing: the pool full (two held), a batch request queues, then an
// interactive one; one release admits the interactive one first.
func crossQueueing(t *testing.T, tg *eppTarget) {
	d := tg.driver(epptest.FullDuplex)
	var held []*epptest.Call
	for i := 0; i < 2; i++ {
		call, pick, err := d.Start(ctx(t), tg.request(nil, 1))
		mustPick(t, tg, pick, err)
		held = append(held, call)
		defer call.Cancel()
	}
	type result struct {
		pick epptest.Pick
		err  error
	}
	start := func(class string) chan result {
		ch := make(chan result, 1)
		go func() {
			call, pick, err := d.Start(ctx(t), tg.request(map[string]string{epp.ObjectiveHeader: class}, 1))
			if call != nil {
				defer call.Cancel()
			}
			ch <- result{pick, err}
		}()
		return ch
	}
	low := start("batch")
	wait.Until(t, "batch queued", func() bool { return queued(t, tg, "batch") == 1 })
	high := start("interactive")
	wait.Until(t, "interactive queued", func() bool { return queued(t, tg, "interactive") == 1 })
	held[0].Cancel()
	select {
	case h := <-high:
		if h.err != nil || h.pick.Header == "" {
			t.Fatalf("interactive: %v %+v", h.err, h.pick)
		}
	case l := <-low:
		t.Fatalf("the batch request was admitted first: %+v", l)
	case <-time.After(5 * time.Second):
		t.Fatal("nothing admitted after a release")
	}
	held[1].Cancel()
	if l := <-low; l.err != nil || l.pick.Header == "" {
		t.Fatalf("batch: %v %+v", l.err, l.pick)
	}
}

// queued is the picker's queue depth for a class; a case that needs it fails
// on a picker that does not give it.
func queued(t *testing.T, tg *eppTarget, class string) int {
	t.Helper()
	if tg.queued == nil {
		t.Fatal("the picker gives no queue depth to wait on")
	}
	return tg.queued(class)
}

func mustPick(t *testing.T, tg *eppTarget, pick epptest.Pick, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	if pick.Immediate != nil {
		t.Fatalf("immediate response %d %q", pick.Immediate.GetStatus().GetCode(), pick.Immediate.GetBody())
	}
	if !slices.Contains(tg.eps[:], pick.Header) {
		t.Fatalf("header pick %q, want one of %v", pick.Header, tg.eps)
	}
	if pick.Metadata != pick.Header {
		t.Fatalf("metadata pick %q, header pick %q: must be equal", pick.Metadata, pick.Header)
	}
}

func mustRefuse(t *testing.T, tg *eppTarget, subset []string, code int) {
	t.Helper()
	r := tg.request(nil, 1)
	r.Subset, r.SubsetSet = subset, true
	_, pick, err := tg.driver(epptest.FullDuplex).Start(ctx(t), r)
	if err != nil {
		t.Fatal(err)
	}
	if got := int(pick.Immediate.GetStatus().GetCode()); got != code {
		t.Fatalf("subset %q: want an immediate %d, got %d (pick %q, body %q)", subset, code, got, pick.Header, pick.Immediate.GetBody())
	}
}

// readChunks reads an upstream body as the data plane gets it: the pieces
// and the whole.
func readChunks(t *testing.T, r io.ReadCloser) ([]byte, [][]byte) {
	t.Helper()
	defer r.Close()
	var whole []byte
	var chunks [][]byte
	buf := make([]byte, 512)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			chunks = append(chunks, append([]byte(nil), buf[:n]...))
			whole = append(whole, buf[:n]...)
		}
		if errors.Is(err, io.EOF) {
			return whole, chunks
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// startSimAt starts a real sim (simtest's defaults) whose HTTP listener is
// on host, a loopback address: endpoints at distinct addresses.
func startSimAt(t *testing.T, host string) *simtest.Sim {
	t.Helper()
	srv, err := server.New(server.Config{Clock: clock.NewScaled(simtest.DefaultTimeScale)})
	if err != nil {
		t.Fatal(err)
	}
	hl, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(c, hl, gl) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("sim at %s: %v", hl.Addr(), err)
		}
	})
	s := &simtest.Sim{HTTPURL: "http://" + hl.Addr().String(), GRPCAddr: gl.Addr().String(), Model: srv.Config().ServedModelName, Server: srv}
	proctest.WaitHTTP(t, s.HTTPURL+"/health")
	return s
}

func simHost(t testing.TB, s *simtest.Sim) string {
	u, err := url.Parse(s.HTTPURL)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// startLlmeshTarget is llmesh's picker over the two sims: two slots in the
// pool, the suite's classes.
func startLlmeshTarget(t *testing.T, sims [2]*simtest.Sim) *eppTarget {
	eps := [2]string{simHost(t, sims[0]), simHost(t, sims[1])}
	mesh := fmt.Sprintf(`listeners:
  - name: main
    address: 127.0.0.1:8080
    routes: [{name: all, match: {path_prefix: /}, pool: llm}]
pools:
  - name: llm
    protocol: openai
    endpoints: [%s, %s]
    capacity: {max_inflight: 2}
    scheduler: {policy: priority}
classes:
  - name: interactive
    priority: 0
    queue: {max_length: 16, max_wait: 60s}
  - name: batch
    priority: 10
    queue: {max_length: 1}
default_class: interactive
`, eps[0], eps[1])
	path := filepath.Join(t.TempDir(), "mesh.yaml")
	if err := os.WriteFile(path, []byte(mesh), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startPickerMesh(t, path, nil)
	return &eppTarget{
		client: epptest.ForwardMetadata(p.client), health: healthpb.NewHealthClient(p.conn), eps: eps, model: sims[0].Model,
		queued: func(class string) int { return p.stats().Queued[class] },
		settle: func(t *testing.T) {
			wait.Until(t, "the picker holds no request", func() bool {
				s := p.stats()
				n := s.InFlight
				for _, q := range s.Queued {
					n += q
				}
				return n == 0
			})
		},
	}
}

// TestCrossImpl runs the cross-implementation cases on every picker and
// prints the table (and writes it to -epp.table).
func TestCrossImpl(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two sims and, with LLMD_EPP_BIN, llm-d's picker")
	}
	// Two addresses: llm-d matches a subset by address alone.
	sims := [2]*simtest.Sim{startSimAt(t, "127.0.0.1"), startSimAt(t, "127.0.0.2")}
	impls := []struct {
		name  string
		start func(*testing.T, [2]*simtest.Sim) (*eppTarget, string)
	}{
		{implLlmesh, func(t *testing.T, s [2]*simtest.Sim) (*eppTarget, string) { return startLlmeshTarget(t, s), "" }},
		{implLlmd, startLlmdTarget},
	}
	cells := map[string]map[string]string{}
	for _, im := range impls {
		cells[im.name] = map[string]string{}
		t.Run(im.name, func(t *testing.T) {
			tg, skip := im.start(t, sims)
			if skip != "" {
				for _, c := range crossCases {
					cells[im.name][c.name] = "not run (" + llmdEnv + " unset)"
				}
				t.Skip(skip)
			}
			for _, c := range crossCases {
				d, declared := c.differs[im.name]
				ok := t.Run(c.name, func(t *testing.T) {
					if declared {
						d.check(t, tg)
					} else {
						c.run(t, tg)
					}
					if tg.settle != nil {
						tg.settle(t)
					}
				})
				switch {
				case declared && ok:
					cells[im.name][c.name] = "declared difference: " + d.why
				case declared:
					cells[im.name][c.name] = "FAIL (the declared difference no longer holds)"
				case ok:
					cells[im.name][c.name] = "pass"
				default:
					cells[im.name][c.name] = "FAIL"
				}
			}
		})
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| case | %s | %s |\n|---|---|---|\n", implLlmesh, implLlmd)
	for _, c := range crossCases {
		fmt.Fprintf(&b, "| %s | %s | %s |\n", c.name, cells[implLlmesh][c.name], cells[implLlmd][c.name])
	}
	t.Logf("cross-implementation table:\n%s", b.String())
	if *crossTable != "" {
		if err := os.WriteFile(*crossTable, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
