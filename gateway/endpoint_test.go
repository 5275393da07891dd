package gateway

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/policy"
	"github.com/llmesh/llmesh/sim/simtest"
)

// simPeak reads the most requests the sim held at once, from its own
// /metrics.
func simPeak(t *testing.T, s *simtest.Sim) int {
	t.Helper()
	res, err := http.Get(s.HTTPURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "llmesh_sim:requests_peak") {
			f := strings.Fields(line)
			n, err := strconv.ParseFloat(f[len(f)-1], 64)
			if err != nil {
				t.Fatalf("bad metric line %q", line)
			}
			return int(n)
		}
	}
	t.Fatalf("sim has no llmesh_sim:requests_peak:\n%s", b)
	return 0
}

// endpointGateway starts two sims behind one gateway pool whose scheduler
// allows limit requests per sim (the pool allows more).
func endpointGateway(t *testing.T, limit int, affinityHeader string) (sims [2]*simtest.Sim, gw string, rec *recorder) {
	t.Helper()
	sims[0], sims[1] = simtest.Start(t), simtest.Start(t)
	eps := []string{strings.TrimPrefix(sims[0].HTTPURL, "http://"), strings.TrimPrefix(sims[1].HTTPURL, "http://")}
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
	_, gw = startGateway(t, Config{Pools: []Pool{{Name: "sim", Upstream: sims[0].HTTPURL, Endpoints: eps, AffinityHeader: affinityHeader}}},
		WithAdmitter(sched), WithRecorder(rec))
	return sims, gw, rec
}

// TestEndpointsTwoSims: requests through one pool reach both sims, each at
// most its endpoint limit at once (from the sims' own peak), and every
// record names the sim it went to.
func TestEndpointsTwoSims(t *testing.T) {
	const limit, n = 2, 16
	sims, gw, rec := endpointGateway(t, limit, "")
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := post(t, context.Background(), gw+"/v1/completions", completion(sims[0].Model, 24))
			defer res.Body.Close()
			if _, err := io.ReadAll(res.Body); err != nil || res.StatusCode != http.StatusOK {
				t.Errorf("status %d, %v", res.StatusCode, err)
			}
		}()
	}
	wg.Wait()
	by := map[string]int{}
	for i := 0; i < n; i++ {
		r := rec.next(t)
		if !r.OK() {
			t.Errorf("request failed: %q", r.Error)
		}
		by[r.Endpoint]++
	}
	for i, s := range sims {
		ep := strings.TrimPrefix(s.HTTPURL, "http://")
		if by[ep] == 0 {
			t.Errorf("sim %d (%s) got no request: %v", i, ep, by)
		}
		if p := simPeak(t, s); p > limit || p == 0 {
			t.Errorf("sim %d held %d requests at once, endpoint limit %d", i, p, limit)
		}
	}
	t.Logf("requests by endpoint: %v", by)
}

// TestEndpointsAffinity: requests with the same affinity header value go to
// the same sim while it has room.
func TestEndpointsAffinity(t *testing.T) {
	sims, gw, rec := endpointGateway(t, 4, "X-Session-Id")
	got := map[string]map[string]bool{}
	for i := 0; i < 6; i++ {
		session := "s" + strconv.Itoa(i%2)
		req, err := http.NewRequest(http.MethodPost, gw+"/v1/completions", strings.NewReader(completion(sims[0].Model, 4)))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Session-Id", session)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		r := rec.next(t)
		if got[session] == nil {
			got[session] = map[string]bool{}
		}
		got[session][r.Endpoint] = true
	}
	for s, eps := range got {
		if len(eps) != 1 {
			t.Errorf("session %s went to %d endpoints: %v", s, len(eps), eps)
		}
	}
	if diff := cmp.Diff(2, len(got)); diff != "" {
		t.Errorf("sessions (-want +got):\n%s", diff)
	}
}

func TestEndpointConfigErrors(t *testing.T) {
	_, err := New(Config{Pools: []Pool{{Name: "p", Upstream: "http://h:1", Endpoints: []string{"h:1", "nope", "h:1"}}}})
	for _, want := range []string{`pools[0].endpoints[1]: "nope" must be host:port`, `pools[0].endpoints[2]: duplicate endpoint "h:1"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("New() = %v, want %q", err, want)
		}
	}
}

func TestConfigFromMeshEndpoints(t *testing.T) {
	c, err := config.Load([]byte(`
listeners: [{name: main, address: 127.0.0.1:0, routes: [{pool: sim}]}]
pools:
  - name: sim
    protocol: openai
    affinity_header: x-session-id
    endpoints: [127.0.0.1:8001, {address: 127.0.0.1:8002, max_inflight: 3}]
`))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := ConfigFromMesh(c, "")
	if err != nil {
		t.Fatal(err)
	}
	p := cfg.Pools[0]
	if diff := cmp.Diff([]string{"127.0.0.1:8001", "127.0.0.1:8002"}, p.Endpoints); diff != "" {
		t.Errorf("endpoints (-want +got):\n%s", diff)
	}
	if p.Upstream != "http://127.0.0.1:8001" || p.AffinityHeader != "x-session-id" {
		t.Errorf("pool %+v", p)
	}
}

// routedAdmitter binds the i-th admission of its inner admitter to
// endpoint eps[i % len(eps)].
type routedAdmitter struct {
	inner *ctlAdmitter
	eps   []string
	n     atomic.Int32
}

type routedLease struct {
	scheduler.Lease
	ep string
}

func (l routedLease) Endpoint() string { return l.ep }

func (a *routedAdmitter) Admit(ctx context.Context, req scheduler.Request) (scheduler.Lease, error) {
	l, err := a.inner.Admit(ctx, req)
	if err != nil {
		return nil, err
	}
	i := int(a.n.Add(1)) - 1
	return routedLease{l, a.eps[i%len(a.eps)]}, nil
}

// TestEndpointsContinuationMoves: a stream preempted mid-way is continued
// under a new lease bound to the other endpoint; the continuation goes
// there (the first sim aborted the original, the second finished the
// continuation) and the client still gets one whole stream.
func TestEndpointsContinuationMoves(t *testing.T) {
	sims := [2]*simtest.Sim{simtest.Start(t, simtest.WithTimeScale(1)), simtest.Start(t, simtest.WithTimeScale(1))}
	eps := []string{strings.TrimPrefix(sims[0].HTTPURL, "http://"), strings.TrimPrefix(sims[1].HTTPURL, "http://")}
	adm := &routedAdmitter{inner: &ctlAdmitter{preemptAt: []int{5}}, eps: eps}
	rec := newRecorder()
	_, gw := startGateway(t, Config{Pools: []Pool{{Name: "sim", Upstream: sims[0].HTTPURL, Endpoints: eps}}},
		WithAdmitter(adm), WithRecorder(rec))
	body := `{"model":"` + sims[0].Model + `","prompt":"the quick brown fox","max_tokens":16,"stream":true,"stream_options":{"include_usage":true}}`
	res := post(t, context.Background(), gw+"/v1/completions", body)
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	r := rec.next(t)
	if !r.OK() || r.Preemptions != 1 || r.OutputTokens != 16 {
		t.Fatalf("record ok=%v (%q) preemptions=%d tokens=%d", r.OK(), r.Error, r.Preemptions, r.OutputTokens)
	}
	if r.Endpoint != eps[1] {
		t.Errorf("last attempt went to %s, want the continuation's endpoint %s", r.Endpoint, eps[1])
	}
	if got := simMetric(t, sims[0], "llmesh_sim:requests_aborted_total"); got != 1 {
		t.Errorf("first sim aborted %v streams, want the preempted original", got)
	}
	if got := simMetric(t, sims[1], "vllm:request_success_total"); got != 1 {
		t.Errorf("second sim finished %v requests, want the continuation", got)
	}
}
