package envoyfilter

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	xdstype "github.com/cncf/xds/go/xds/type/v3"
	"github.com/envoyproxy/envoy/contrib/golang/common/go/api"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/pools"
	"github.com/llmesh/llmesh/testkit/fakesdk"
	"github.com/llmesh/llmesh/testkit/wait"
)

// testMesh is a mesh config with one pool of capacity 1 and two classes:
// interactive (tenant "gold", TTFT SLO) and batch (preemptible, default).
// The fake's peer (127.0.0.1) is trusted for priority, so request bodies
// stream through unless a test asks for the engine priority guard
// (bodypriority_test.go).
func testMesh(policy string, extra string) string {
	return `{
	"pools": [{"name": "sim", "protocol": "openai", "endpoints": ["127.0.0.1:9"],
	           "capacity": {"max_inflight": 1},
	           "scheduler": {"policy": "` + policy + `", "preemption": {"min_run_time": "0s"}}}],
	"classes": [
	  {"name": "interactive", "priority": 0, "slo": {"ttft": "20ms"}},
	  {"name": "batch", "priority": 10, "preemptible": true}
	],
	"default_class": "batch",
	"classification": {"tenants": {"gold": "interactive"},
	                   "priority_header": {"name": "x-llmesh-class", "trusted_sources": ["127.0.0.1/32"]}}` + extra + `
}`
}

func structAny(t testing.TB, settings string) *anypb.Any {
	t.Helper()
	var obj map[string]interface{}
	if err := json.Unmarshal([]byte(settings), &obj); err != nil {
		t.Fatalf("test settings are not JSON: %v\n%s", err, settings)
	}
	st, err := structpb.NewStruct(obj)
	if err != nil {
		t.Fatal(err)
	}
	a, err := anypb.New(st)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func typedStructAny(t testing.TB, settings string) *anypb.Any {
	t.Helper()
	sa := structAny(t, settings)
	var st structpb.Struct
	if err := sa.UnmarshalTo(&st); err != nil {
		t.Fatal(err)
	}
	a, err := anypb.New(&xdstype.TypedStruct{TypeUrl: "type.googleapis.com/llmesh.filter.v1.Settings", Value: &st})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// harness is one parsed filter config with its stats.
type harness struct {
	t       testing.TB
	plugin  *Plugin
	cfg     interface{}
	metrics *fakesdk.ConfigCallbacks
	scheds  *testSchedulers
}

// testSchedulers builds one scheduler set (scheduler/pools, what the Envoy
// process uses) per config, as the process wiring does for a first config.
type testSchedulers struct {
	mu   sync.Mutex
	sets []*pools.Set
}

func (ts *testSchedulers) NewAdmitter(mc *config.Config) (scheduler.Admitter, error) {
	sc, err := pools.Config(mc)
	if err != nil {
		return nil, fmt.Errorf("mesh: %w", err)
	}
	s, err := pools.New(sc, nil)
	if err != nil {
		return nil, err
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.sets = append(ts.sets, s)
	return s, nil
}

func (ts *testSchedulers) Close() {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	for _, s := range ts.sets {
		_ = s.Close()
	}
}

// newHarness parses settings with an in-process scheduler when sched is
// true.
func newHarness(t testing.TB, settings string, sched bool, mutate ...func(*Env)) *harness {
	t.Helper()
	fakesdk.InstallCAPI()
	h := &harness{t: t, metrics: fakesdk.NewConfigCallbacks()}
	env := Env{}
	if sched {
		h.scheds = &testSchedulers{}
		env.NewAdmitter = h.scheds.NewAdmitter
		t.Cleanup(func() { h.scheds.Close() })
	}
	for _, m := range mutate {
		m(&env)
	}
	h.plugin = New(env)
	cfg, err := h.plugin.Parse(structAny(t, settings), h.metrics)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	h.cfg = cfg
	return h
}

func (h *harness) stream(opts fakesdk.Options) *fakesdk.Stream {
	return fakesdk.NewStream(h.plugin.Factory, h.cfg, opts)
}

func (h *harness) counter(name string) uint64 {
	v, ok := h.metrics.Counter(name)
	if !ok {
		h.t.Fatalf("counter %s not defined", name)
	}
	return v
}

func (h *harness) gauge(name string) int64 {
	v, ok := h.metrics.Gauge(name)
	if !ok {
		h.t.Fatalf("gauge %s not defined", name)
	}
	return int64(v)
}

func noViolations(t testing.TB, s *fakesdk.Stream) {
	t.Helper()
	if v := s.Violations(); len(v) > 0 {
		t.Errorf("SDK rule violations:\n%s", strings.Join(v, "\n"))
	}
	if p := s.Panics(); len(p) > 0 {
		t.Errorf("panics reached the SDK:\n%s", strings.Join(p, "\n"))
	}
	if n := s.LateCalls(); n > 0 {
		t.Errorf("%d Continue/SendLocalReply calls after OnDestroy", n)
	}
}

func want(t testing.TB, what string, got, exp interface{}) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(exp) {
		t.Errorf("%s = %v, want %v", what, got, exp)
	}
}

func wantStatus(t testing.TB, what string, r fakesdk.Result, st api.StatusType) {
	t.Helper()
	if r.Status != st || r.TimedOut || r.Skipped {
		t.Fatalf("%s: %+v, want status %d", what, r, st)
	}
}

// sseChunks is an OpenAI completion stream with three tokens in three
// chunks, a usage chunk and [DONE].
var sseChunks = []string{
	`data: {"id":"c1","object":"text_completion","choices":[{"index":0,"text":"Hel","finish_reason":null}]}` + "\n\n",
	`data: {"id":"c1","object":"text_completion","choices":[{"index":0,"text":"lo","finish_reason":null}]}` + "\n\n",
	`data: {"id":"c1","object":"text_completion","choices":[{"index":0,"text":"!","finish_reason":"length"}]}` + "\n\n",
	`data: {"id":"c1","object":"text_completion","choices":[],"usage":{"prompt_tokens":4,"completion_tokens":3,"total_tokens":7}}` + "\n\ndata: [DONE]\n\n",
}

func sseRequest(kv ...string) *fakesdk.HeaderMap {
	return fakesdk.RequestHeaders("POST", "/v1/completions", append([]string{"content-type", "application/json"}, kv...)...)
}

func sseResponse() *fakesdk.HeaderMap {
	return fakesdk.ResponseHeaders(200, "content-type", "text/event-stream")
}

// waitQueued waits until the in-process scheduler has n requests of class
// waiting: a held request reaches the scheduler from its own goroutine.
func (h *harness) waitQueued(class string, n int) {
	h.t.Helper()
	wait.Until(h.t, fmt.Sprintf("%d %s request(s) queued", n, class), func() bool {
		h.scheds.mu.Lock()
		defer h.scheds.mu.Unlock()
		got := 0
		for _, s := range h.scheds.sets {
			for _, ps := range s.Stats() {
				got += ps.Queued[class]
			}
		}
		return got == n
	})
}

// The type URLs the plugin config arrives under (envoyfilter/settings reads
// each).
const (
	typedStructURL    = "type.googleapis.com/xds.type.v3.TypedStruct"
	udpaTypedStructV1 = "type.googleapis.com/udpa.type.v1.TypedStruct"
	structURL         = "type.googleapis.com/google.protobuf.Struct"
)
