package process_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/envoyproxy/envoy/contrib/golang/common/go/api"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/envoyfilter"
	"github.com/llmesh/llmesh/envoyfilter/process"
	"github.com/llmesh/llmesh/exchange"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/sim"
	"github.com/llmesh/llmesh/sim/simtest"
	"github.com/llmesh/llmesh/testkit/fakesdk"
	"github.com/llmesh/llmesh/testkit/wait"
)

func testMesh(policy, extra string) string {
	return `{
	"pools": [{"name": "sim", "protocol": "openai", "endpoints": ["127.0.0.1:9"],
	           "capacity": {"max_inflight": 2},
	           "scheduler": {"policy": "` + policy + `"}}],
	"classes": [{"name": "batch", "priority": 10}],
	"default_class": "batch"` + extra + `
}`
}

func load(t *testing.T, mesh string) *config.Config {
	t.Helper()
	c, err := config.Load([]byte(mesh))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// admitOnce admits and releases one request through a and returns how many
// the set's one pool admitted in all.
func admitOnce(t *testing.T, s *process.Schedulers, a scheduler.Admitter) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	l, err := a.Admit(ctx, scheduler.Request{Pool: "sim"})
	if err != nil {
		t.Fatal(err)
	}
	l.Release(scheduler.Done)
	st := s.Stats()
	if len(st) != 1 {
		t.Fatalf("stats %+v, want the one pool", st)
	}
	return fmt.Sprint(st[0].Admitted)
}

// TestOneSetPerProcess: every config Envoy parses schedules through the
// process's one scheduler set: the same mesh gets it as it is, a changed
// mesh is applied to it (the pool is rebuilt, its counters carry on),
// scheduler_service gets a client instead.
func TestOneSetPerProcess(t *testing.T) {
	var s process.Schedulers
	defer s.Close()
	a1, err := s.NewAdmitter(load(t, testMesh("fifo", "")))
	if err != nil {
		t.Fatal(err)
	}
	a2, err := s.NewAdmitter(load(t, testMesh("fifo", `, "relocation": {"http": [{"header": "x"}]}`)))
	if err != nil {
		t.Fatal(err)
	}
	if a1 != a2 {
		t.Error("two configs got two scheduler sets")
	}
	if got := admitOnce(t, &s, a1); got != "1" {
		t.Errorf("admitted %s, want 1", got)
	}
	b, err := s.NewAdmitter(load(t, testMesh("preemptive", "")))
	if err != nil {
		t.Fatal(err)
	}
	if b != a1 {
		t.Error("a changed mesh got a scheduler set of its own")
	}
	// The replaced pool's counters are folded into the new one's.
	if got := admitOnce(t, &s, b); got != "2" {
		t.Errorf("admitted %s after the change, want 2", got)
	}
	if p := s.Stats()[0].MaxInflight; p != 2 {
		t.Errorf("max_inflight %d", p)
	}
	c, err := s.NewAdmitter(load(t, testMesh("fifo", `, "scheduler_service": {"address": "127.0.0.1:1", "failure_mode": "fail_closed"}`)))
	if err != nil {
		t.Fatal(err)
	}
	if c == a1 || c == nil {
		t.Errorf("scheduler_service config got %T", c)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.NewAdmitter(load(t, testMesh("fifo", ""))); err == nil {
		t.Error("NewAdmitter after Close succeeded")
	}
}

// TestEnvoyFollowsEngineCapacity: the Envoy host's in-process scheduler
// learns its pool's capacity from the engine's /metrics. The real sim runs
// 2 sequences at most and gets 5 long requests from elsewhere: it reports
// 2 running and 3 waiting, so the filter's pool limit drops from
// max_inflight 16 to running + slack = 4 and a 5th stream through the
// filter waits; once the engine's load is gone the limit rises again and
// the waiting stream is admitted. Without capacity watchers in the Envoy
// process all five pass at once.
func TestEnvoyFollowsEngineCapacity(t *testing.T) {
	for _, tc := range []struct {
		name string
		// capacity and endpoint are the pool's capacity section and its
		// endpoint, given the sim's address.
		capacity, endpoint func(addr string) string
		limit              func(ps scheduler.PoolStats) int
	}{
		{
			name: "pool metrics url",
			capacity: func(a string) string {
				return `{"max_inflight": 16, "metrics": {"url": "http://` + a + `/metrics", "interval": "10ms"}}`
			},
			endpoint: func(a string) string { return `"` + a + `"` },
			limit:    func(ps scheduler.PoolStats) int { return ps.Limit },
		},
		{
			name: "endpoint url template",
			capacity: func(string) string {
				return `{"max_inflight": 16, "metrics": {"url_template": "http://{endpoint}/metrics", "interval": "10ms"}}`
			},
			endpoint: func(a string) string { return `"` + a + `"` },
			limit: func(ps scheduler.PoolStats) int {
				if len(ps.Endpoints) != 1 {
					return -1
				}
				return ps.Endpoints[0].Limit
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) { followsCapacity(t, tc.capacity, tc.endpoint, tc.limit) })
	}
}

func followsCapacity(t *testing.T, capacity, endpoint func(string) string, limit func(scheduler.PoolStats) int) {
	sm := simtest.Start(t, simtest.WithTimeScale(1), simtest.WithEngine(sim.Config{MaxNumSeqs: 2}))
	addr := strings.TrimPrefix(sm.HTTPURL, "http://")
	load, stopLoad := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() {
		stopLoad()
		wg.Wait()
	}()
	for i := 0; i < 5; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := fmt.Sprintf(`{"model":%q,"prompt":"hello","max_tokens":4000,"stream":true}`, sm.Model)
			req, _ := http.NewRequestWithContext(load, http.MethodPost, sm.HTTPURL+"/v1/completions", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return // stopped by the test
			}
			defer resp.Body.Close()
			_, _ = io.Copy(io.Discard, resp.Body)
		}()
	}

	fakesdk.InstallCAPI()
	var scheds process.Schedulers
	defer scheds.Close()
	plugin := envoyfilter.New(process.Env(&scheds, &process.Telemetry{}))
	mesh := `{"pools": [{"name": "sim", "protocol": "openai", "endpoints": [` + endpoint(addr) + `], "capacity": ` + capacity(addr) + `}],
	          "classes": [{"name": "batch", "priority": 10}], "default_class": "batch"}`
	cfg, err := plugin.Parse(settings(t, mesh), fakesdk.NewConfigCallbacks())
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	stream := func() *fakesdk.Stream {
		return fakesdk.NewStream(plugin.Factory, cfg, fakesdk.Options{Timeout: 20 * time.Second})
	}
	request := func() *fakesdk.HeaderMap {
		return fakesdk.RequestHeaders("POST", "/v1/completions", "content-type", "application/json")
	}
	var admitted []*fakesdk.Stream
	defer func() {
		for _, s := range admitted {
			s.Complete()
		}
	}()
	// The first stream builds the process's scheduler set.
	first := stream()
	if r := first.DecodeHeaders(request(), true); r.Status != api.Continue {
		t.Fatalf("first stream: %+v", r)
	}
	admitted = append(admitted, first)
	stats := func() scheduler.PoolStats {
		st := scheds.Stats()
		if len(st) != 1 {
			t.Fatalf("stats %+v", st)
		}
		return st[0]
	}
	wait.Until(t, "the limit learned from the saturated engine (4)", func() bool { return limit(stats()) == 4 })
	for i := 2; i <= 4; i++ {
		s := stream()
		if r := s.DecodeHeaders(request(), true); r.Status != api.Continue {
			t.Fatalf("stream %d of 4: %+v", i, r)
		}
		admitted = append(admitted, s)
	}
	fifth := stream()
	held := fifth.StartDecodeHeaders(request(), true)
	wait.Until(t, "the fifth stream queued", func() bool { return stats().Queued["batch"] == 1 })
	if held.Ready() {
		t.Fatalf("the fifth stream passed a learned limit of 4: %+v", held.Wait())
	}
	stopLoad()
	wg.Wait()
	if r := held.Wait(); r.Status != api.Continue {
		t.Fatalf("fifth stream after the engine's load ended: %+v", r)
	}
	admitted = append(admitted, fifth)
	if l := limit(stats()); l <= 4 {
		t.Errorf("limit %d after the engine's load ended, want above 4", l)
	}
	for _, s := range admitted {
		if v := s.Violations(); len(v) > 0 {
			t.Errorf("SDK rule violations:\n%s", strings.Join(v, "\n"))
		}
	}
}

func settings(t *testing.T, mesh string) *anypb.Any {
	t.Helper()
	var obj map[string]interface{}
	if err := json.Unmarshal([]byte(`{"mesh": `+mesh+`}`), &obj); err != nil {
		t.Fatal(err)
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

// TestTelemetryRecorder: no OTLP endpoint, no recorder; with one, a
// recorder that accepts observations and shuts down cleanly. The
// "collector" is a gRPC server on loopback without the OTLP services: the
// export is refused at once (Unimplemented) instead of being retried.
func TestTelemetryRecorder(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()
	var tel process.Telemetry
	r, err := tel.NewRecorder(load(t, testMesh("fifo", "")))
	if err != nil || r != nil {
		t.Fatalf("without OTLP: %v, %v", r, err)
	}
	r, err = tel.NewRecorder(load(t, testMesh("fifo", `, "telemetry": {"otlp": {"endpoint": "`+ln.Addr().String()+`", "insecure": true}}`)))
	if err != nil || r == nil {
		t.Fatalf("with OTLP: %v, %v", r, err)
	}
	now := time.Now()
	r.Record(exchange.Record{Observation: exchange.Observation{Received: now, FirstToken: now.Add(time.Millisecond), End: now.Add(time.Second), HasTTFT: true, TTFT: time.Millisecond}, Class: "batch", Model: "m"})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = tel.Shutdown(ctx) // the refused export is an error; what matters is that it returns
	if ctx.Err() != nil {
		t.Error("Shutdown did not return before its deadline")
	}
}
