package gateway

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/policy"
	"github.com/llmesh/llmesh/sim/simtest"
	"github.com/llmesh/llmesh/testkit/proctest"
)

// twoFrontedSims starts two sims, each behind a killable front, and a
// gateway pool over the fronts scheduled by a FIFO scheduler of perEP slots
// per endpoint.
func twoFrontedSims(t *testing.T, perEP int, opts ...Option) (fronts [2]*proctest.Killable, sims [2]*simtest.Sim, g *Gateway, gw string, sched *scheduler.Scheduler) {
	t.Helper()
	var eps []string
	for i := range sims {
		sims[i] = simtest.Start(t)
		fronts[i] = proctest.NewKillable(t, strings.TrimPrefix(sims[i].HTTPURL, "http://"))
		fronts[i].Reset = true // a killed process's kernel resets its connections
		eps = append(eps, fronts[i].Addr())
	}
	fifo, err := policy.Lookup("fifo")
	if err != nil {
		t.Fatal(err)
	}
	sched, err = scheduler.New(scheduler.Config{
		Pools: []scheduler.PoolConfig{{Name: "sim", MaxInflight: 2 * perEP, Policy: fifo,
			Endpoints: []scheduler.EndpointConfig{{Name: eps[0]}, {Name: eps[1]}}}},
		Classes: []scheduler.ClassConfig{{Name: "default"}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sched.Close() })
	g, gw = startGateway(t, Config{Pools: []Pool{{Name: "sim", Upstream: "http://" + eps[0], Endpoints: eps}}},
		append([]Option{WithAdmitter(sched)}, opts...)...)
	return fronts, sims, g, gw, sched
}

// streamResult is what one client saw.
type streamResult struct {
	status   int
	started  bool // at least one data event arrived
	done     bool // [DONE] arrived
	errEvent bool // the stream ended with an error payload
	err      error
}

func clientStream(ctx context.Context, client *http.Client, url, body string) streamResult {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	res, err := client.Do(req)
	if err != nil {
		return streamResult{err: err}
	}
	defer res.Body.Close()
	r := streamResult{status: res.StatusCode}
	if res.StatusCode != http.StatusOK {
		io.Copy(io.Discard, res.Body)
		return r
	}
	b, err := io.ReadAll(res.Body)
	r.err = err
	for _, line := range strings.Split(string(b), "\n") {
		data, ok := strings.CutPrefix(line, "data:")
		if !ok {
			continue
		}
		data = strings.TrimSpace(data)
		switch {
		case data == "[DONE]":
			r.done = true
		case strings.Contains(data, `"error"`):
			r.errEvent = true
		default:
			r.started = true
		}
	}
	return r
}

// TestKillOneOfTwoSimsUnderLoad: ~200 streaming requests a second through
// two sims; one is killed a second in. No request that had not started
// streaming fails: the first connection refused ejects the dead endpoint
// from the picker and the failed requests go once more to the live one. A
// stream cut mid-way ends with an error event, never a bare close.
func TestKillOneOfTwoSimsUnderLoad(t *testing.T) {
	fronts, sims, g, gw, sched := twoFrontedSims(t, 64)
	const rate, total, killAt = 200, 500, 200 // requests/s, requests, kill after this many
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	defer client.CloseIdleConnections()
	body := completion(sims[0].Model, 24)
	results := make([]streamResult, total)
	var wg sync.WaitGroup
	tick := time.NewTicker(time.Second / rate)
	defer tick.Stop()
	var killed atomic.Bool
	for i := range total {
		<-tick.C
		if i == killAt {
			fronts[0].Kill()
			killed.Store(true)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			results[i] = clientStream(ctx, client, gw+"/v1/completions", body)
		}()
	}
	wg.Wait()
	var notStarted, cut, ok int
	var firstErrs []string
	for i, r := range results {
		switch {
		case r.status == http.StatusOK && r.done:
			ok++
		case r.status == http.StatusOK && r.started:
			cut++
			if !r.errEvent {
				t.Errorf("request %d: stream cut without an error event (err %v)", i, r.err)
			}
		default:
			notStarted++
			if len(firstErrs) < 5 {
				firstErrs = append(firstErrs, fmt.Sprintf("request %d: status %d, err %v", i, r.status, r.err))
			}
		}
	}
	st := sched.Stats()[0].Endpoints
	t.Logf("%d requests at %d/s, one of two sims killed after %d: %d done, %d cut mid-stream, %d failed before streaming; %d retried; ejections %d",
		total, rate, killAt, ok, cut, notStarted, g.Retries(), st[0].Ejections)
	if notStarted != 0 {
		t.Errorf("%d requests failed before any byte reached the client, want 0: %s", notStarted, strings.Join(firstErrs, "; "))
	}
	if g.Retries() == 0 {
		t.Error("no request was retried: the kill did not reach the dead endpoint")
	}
	if st[0].Ejections == 0 {
		t.Error("the dead endpoint was never ejected")
	}
}

// TestRetryOn503ElsewhereAndBurstEjects: an engine answering 503 before
// any byte gets the request sent once more to the other endpoint; a burst
// of them ejects it.
func TestRetryOn503ElsewhereAndBurstEjects(t *testing.T) {
	s := simtest.Start(t)
	var bad atomic.Int64
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		bad.Add(1)
		http.Error(w, "overloaded", http.StatusServiceUnavailable)
	}))
	t.Cleanup(down.Close)
	eps := []string{strings.TrimPrefix(down.URL, "http://"), strings.TrimPrefix(s.HTTPURL, "http://")}
	fifo, _ := policy.Lookup("fifo")
	sched, err := scheduler.New(scheduler.Config{
		Pools: []scheduler.PoolConfig{{Name: "sim", MaxInflight: 8, Policy: fifo,
			Endpoints: []scheduler.EndpointConfig{{Name: eps[0]}, {Name: eps[1]}}}},
		Classes: []scheduler.ClassConfig{{Name: "default"}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sched.Close() })
	g, gw := startGateway(t, Config{Pools: []Pool{{Name: "sim", Upstream: s.HTTPURL, Endpoints: eps}}}, WithAdmitter(sched))
	for i := range 20 {
		r := clientStream(context.Background(), http.DefaultClient, gw+"/v1/completions", completion(s.Model, 4))
		if r.status != http.StatusOK || !r.done {
			t.Fatalf("request %d: status %d done %v err %v, want a whole stream from the live endpoint", i, r.status, r.done, r.err)
		}
	}
	st := sched.Stats()[0].Endpoints[0]
	if !st.Ejected || bad.Load() != scheduler.DefaultEjectionBurst {
		t.Fatalf("503 endpoint: ejected %v after %d requests, want ejected after the burst of %d", st.Ejected, bad.Load(), scheduler.DefaultEjectionBurst)
	}
	if g.Retries() != uint64(bad.Load()) {
		t.Fatalf("retries %d, want one per 503 (%d)", g.Retries(), bad.Load())
	}
}
