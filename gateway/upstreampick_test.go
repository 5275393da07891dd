package gateway

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/exchange"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/policy"
	"github.com/llmesh/llmesh/sim/simtest"
)

// pickGateway starts two sims behind one pool (limit per sim, the pool
// allowing four times that) with accept_upstream_pick as given.
func pickGateway(t *testing.T, limit int, accept bool) (sims [2]*simtest.Sim, eps []string, gw string, rec *recorder) {
	t.Helper()
	sims[0], sims[1] = simtest.Start(t), simtest.Start(t)
	eps = []string{strings.TrimPrefix(sims[0].HTTPURL, "http://"), strings.TrimPrefix(sims[1].HTTPURL, "http://")}
	fifo, err := policy.Lookup("fifo")
	if err != nil {
		t.Fatal(err)
	}
	sched, err := scheduler.New(scheduler.Config{
		Pools: []scheduler.PoolConfig{{Name: "sim", MaxInflight: 4 * limit, Policy: fifo,
			Endpoints: []scheduler.EndpointConfig{{Name: eps[0], MaxInflight: limit}, {Name: eps[1], MaxInflight: limit}}}},
		Classes: []scheduler.ClassConfig{{Name: "default"}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sched.Close() })
	rec = &recorder{ch: make(chan Record, 256)}
	_, gw = startGateway(t, Config{Pools: []Pool{{Name: "sim", Upstream: sims[0].HTTPURL, Endpoints: eps, AcceptUpstreamPick: accept}}},
		WithAdmitter(sched), WithRecorder(rec))
	return sims, eps, gw, rec
}

func postPicked(t *testing.T, gw, body, pick string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, gw+"/v1/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if pick != "" {
		req.Header.Set(exchange.PickHeader, pick)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestUpstreamPickTwoSims: requests picked upstream for the second sim all
// go there, though the scheduler would spread them, and count against its
// limit: with one slot there, they run there one at a time (the sim's own
// peak) while the first sim, with room, gets nothing.
func TestUpstreamPickTwoSims(t *testing.T) {
	const n = 4
	sims, eps, gw, rec := pickGateway(t, 1, true)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := postPicked(t, gw, completion(sims[1].Model, 16), eps[1])
			defer res.Body.Close()
			if b, err := io.ReadAll(res.Body); err != nil || res.StatusCode != http.StatusOK {
				t.Errorf("status %d, %v: %s", res.StatusCode, err, b)
			}
		}()
	}
	wg.Wait()
	for i := 0; i < n; i++ {
		r := rec.next(t)
		if !r.OK() || r.Endpoint != eps[1] {
			t.Errorf("request went to %q (error %q), want the picked %s", r.Endpoint, r.Error, eps[1])
		}
	}
	if p := simPeak(t, sims[1]); p != 1 {
		t.Errorf("picked sim held %d requests at once, its endpoint limit is 1", p)
	}
	if p := simPeak(t, sims[0]); p != 0 {
		t.Errorf("the sim nobody picked served %d at once", p)
	}
}

// TestUpstreamPickRefused: a pick the pool cannot honour is answered by
// the gateway before admission: not one of the pool's endpoints is 503
// (not retryable: the same pick fails again), a malformed one 400, both
// with the OpenAI error body naming the header.
func TestUpstreamPickRefused(t *testing.T) {
	sims, _, gw, rec := pickGateway(t, 1, true)
	for _, tc := range []struct {
		pick   string
		status int
		typ    string
		msg    string
	}{
		{"127.0.0.1:1", 503, "unavailable", `upstream pick is not an endpoint of the pool: x-gateway-destination-endpoint: \"127.0.0.1:1\"`},
		{"sim-b", 400, "bad_request", `x-gateway-destination-endpoint: \"sim-b\" must be host:port`},
	} {
		res := postPicked(t, gw, completion(sims[0].Model, 4), tc.pick)
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != tc.status || !strings.Contains(string(b), `"type":"`+tc.typ+`"`) || !strings.Contains(string(b), tc.msg) {
			t.Errorf("pick %q: %d %s; want %d, type %s, with %s", tc.pick, res.StatusCode, b, tc.status, tc.typ, tc.msg)
		}
		if res.Header.Get("Retry-After") != "" {
			t.Errorf("pick %q: a retry hint for a refusal that a retry repeats", tc.pick)
		}
		if r := rec.next(t); r.OK() || r.Endpoint != "" {
			t.Errorf("pick %q: record %+v, want a refusal sent nowhere", tc.pick, r)
		}
	}
	if p := simPeak(t, sims[0]) + simPeak(t, sims[1]); p != 0 {
		t.Errorf("refused requests reached a sim (%d)", p)
	}
}

// TestUpstreamPickOffByDefault: without accept_upstream_pick the header is
// a client's claim and is ignored: the scheduler picks (the first sim,
// idle and first in order).
func TestUpstreamPickOffByDefault(t *testing.T) {
	sims, eps, gw, rec := pickGateway(t, 2, false)
	for i := 0; i < 3; i++ {
		res := postPicked(t, gw, completion(sims[0].Model, 4), eps[1])
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if r := rec.next(t); !r.OK() || r.Endpoint != eps[0] {
			t.Errorf("request %d went to %q (error %q), want the scheduler's %s", i, r.Endpoint, r.Error, eps[0])
		}
	}
}

func TestConfigFromMeshUpstreamPick(t *testing.T) {
	c, err := config.Load([]byte(`
listeners: [{name: main, address: 127.0.0.1:0, routes: [{pool: a}, {pool: b, match: {path_prefix: /b}}]}]
pools:
  - {name: a, protocol: openai, endpoints: [127.0.0.1:8001, 127.0.0.1:8002], accept_upstream_pick: true}
  - {name: b, protocol: openai, endpoints: [127.0.0.1:8003]}
`))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := ConfigFromMesh(c, "")
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.Pools[0].AcceptUpstreamPick || cfg.Pools[1].AcceptUpstreamPick {
		t.Fatalf("accept_upstream_pick %v, %v; want true, false", cfg.Pools[0].AcceptUpstreamPick, cfg.Pools[1].AcceptUpstreamPick)
	}
}
