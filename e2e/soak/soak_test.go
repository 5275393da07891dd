// Package soak holds the long-running load test behind `make soak`: many
// concurrent streams through the gateway to the simulated engine, checking
// that nothing is lost and nothing leaks. It runs only with LLMESH_SOAK=1.
package soak

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmesh/llmesh/gateway"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/policy"
	"github.com/llmesh/llmesh/sim/simtest"
	"github.com/llmesh/llmesh/testkit/proctest"
	"github.com/llmesh/llmesh/testkit/wait"
)

func TestMain(m *testing.M) { proctest.Main(m) }

// envPositive is the environment variable name parsed by parse (what
// names the kind of value it wants), or def when it is unset; anything but
// a positive value fails the test.
func envPositive[T int | time.Duration](t *testing.T, name string, def T, what string, parse func(string) (T, error)) T {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	x, err := parse(v)
	if err != nil || x <= 0 {
		t.Fatalf("%s=%q: want a positive %s", name, v, what)
	}
	return x
}

// footprint is the process's goroutine count and live heap after a GC.
type footprint struct {
	goroutines int
	heap       uint64
}

func measure() footprint {
	// Twice: sync.Pool contents survive one collection in the victim cache,
	// and pooled buffers are not live data.
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return footprint{goroutines: runtime.NumGoroutine(), heap: m.HeapAlloc}
}

// steady measures once the goroutine count has stopped falling (closed
// connections' goroutines exit asynchronously): three equal readings
// 100ms apart, or whatever it is after 10s.
func steady() footprint {
	var f footprint
	same := -1
	_ = wait.Poll{Timeout: 10 * time.Second, Interval: 100 * time.Millisecond}.Check("a steady goroutine count", func() error {
		g := measure()
		if same >= 0 && g.goroutines == f.goroutines {
			same++
		} else {
			same = 0
		}
		f = g
		if same < 3 {
			return errors.New("still changing")
		}
		return nil
	})
	return f
}

func (f footprint) String() string {
	return fmt.Sprintf("%d goroutines, heap %.1f MiB", f.goroutines, float64(f.heap)/(1<<20))
}

// result counts what the clients saw.
type result struct {
	sent, complete, failed atomic.Int64
	mu                     sync.Mutex
	examples               []string
}

func (r *result) fail(s string) {
	r.failed.Add(1)
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.examples) < 5 {
		r.examples = append(r.examples, s)
	}
}

// stream sends one streamed completion and checks it ended with [DONE]
// after the usage the engine reported.
func stream(ctx context.Context, c *http.Client, url, body string, r *result) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		r.fail(err.Error())
		return
	}
	req.Header.Set("Content-Type", "application/json")
	r.sent.Add(1)
	res, err := c.Do(req)
	if err != nil {
		r.fail(err.Error())
		return
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		r.fail("status " + res.Status)
		return
	}
	sc := bufio.NewScanner(res.Body)
	var last, usage string
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, "data:") {
			last = line
			if strings.Contains(line, `"usage"`) {
				usage = line
			}
		}
	}
	if err := sc.Err(); err != nil {
		r.fail("reading: " + err.Error())
		return
	}
	if last != "data: [DONE]" || usage == "" {
		r.fail(fmt.Sprintf("stream ended with %q (usage seen: %v)", last, usage != ""))
		return
	}
	r.complete.Add(1)
}

// TestSoak keeps LLMESH_SOAK_STREAMS (default 1000) streams in flight
// through a scheduled gateway to the sim for LLMESH_SOAK_DURATION (default
// 60s). LLMESH_SOAK_HEAPPROFILE=file saves the live heap after the run
// (and file.base at the baseline; compare with go tool pprof -base).
// Every request must complete; afterwards the scheduler holds no
// capacity and queues nothing, and the process's goroutines and live heap
// are back where they were after the warm-up.
func TestSoak(t *testing.T) {
	if os.Getenv("LLMESH_SOAK") != "1" {
		t.Skip("soak test: set LLMESH_SOAK=1 (make soak)")
	}
	streams := envPositive(t, "LLMESH_SOAK_STREAMS", 1000, "integer", strconv.Atoi)
	duration := envPositive(t, "LLMESH_SOAK_DURATION", time.Minute, "duration", time.ParseDuration)
	const maxInflight = 256

	s := simtest.Start(t)
	pol, err := policy.Lookup("priority")
	if err != nil {
		t.Fatal(err)
	}
	sched, err := scheduler.New(scheduler.Config{
		Pools:   []scheduler.PoolConfig{{Name: "sim", MaxInflight: maxInflight, Policy: pol}},
		Classes: []scheduler.ClassConfig{{Name: "interactive", Priority: 0}, {Name: "batch", Priority: 10}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sched.Close()
	g, err := gateway.New(gateway.Config{Pools: []gateway.Pool{{Name: "sim", Upstream: s.HTTPURL}}}, gateway.WithAdmitter(sched))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := proctest.Go(t, "gateway", func(ctx context.Context) error {
		err := g.Serve(ctx, ln, 10*time.Second)
		g.Close()
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return err
	})
	defer func() {
		if err := served.Stop(); err != nil {
			t.Errorf("gateway: %v", err)
		}
	}()
	url := "http://" + ln.Addr().String() + "/v1/completions"
	tr := &http.Transport{MaxIdleConns: streams, MaxIdleConnsPerHost: streams, IdleConnTimeout: time.Minute}
	client := &http.Client{Transport: tr}
	defer tr.CloseIdleConnections()

	body := func(i int) string {
		return `{"model":"` + s.Model + `","prompt":"soak stream ` + strconv.Itoa(i) +
			`","max_tokens":32,"stream":true,"stream_options":{"include_usage":true}}`
	}
	// settle drops idle connections on both sides so that only what a
	// request leaves behind (leaks) remains.
	settle := func() {
		tr.CloseIdleConnections()
		g.Close()
	}

	// Warm-up: one request per stream, so connection pools and buffers
	// exist before the baseline is taken.
	var warm result
	var wg sync.WaitGroup
	for i := 0; i < streams; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); stream(context.Background(), client, url, body(i), &warm) }()
	}
	wg.Wait()
	if warm.failed.Load() != 0 {
		t.Fatalf("warm-up: %d of %d failed, e.g. %q", warm.failed.Load(), warm.sent.Load(), warm.examples)
	}
	settle()
	base := steady()
	if path := os.Getenv("LLMESH_SOAK_HEAPPROFILE"); path != "" {
		writeHeapProfile(t, path+".base")
	}
	t.Logf("baseline after warm-up (%d requests): %v", warm.sent.Load(), base)

	var r result
	ctx, stop := context.WithTimeout(context.Background(), duration)
	defer stop()
	var peak atomic.Int64 // goroutines, sampled every 10s
	start := time.Now()
	for i := 0; i < streams; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ctx.Err() == nil; n++ {
				// Requests in flight when the time is up finish normally:
				// they are not sent with ctx, so none is cut by the test.
				stream(context.Background(), client, url, body(i*1_000_000+n), &r)
			}
		}()
	}
	sampler := time.NewTicker(10 * time.Second)
	defer sampler.Stop()
	for running := true; running; {
		select {
		case <-ctx.Done():
			running = false
		case <-sampler.C:
			p := poolStats(t, sched)
			if g := int64(runtime.NumGoroutine()); g > peak.Load() {
				peak.Store(g)
			}
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			t.Logf("%5.0fs: %d complete, %d failed; scheduler in flight %d, queued %v; %d goroutines, heap %.1f MiB",
				time.Since(start).Seconds(), r.complete.Load(), r.failed.Load(), p.InFlight, p.Queued, runtime.NumGoroutine(), float64(m.HeapAlloc)/(1<<20))
		}
	}
	wg.Wait()
	elapsed := time.Since(start)

	p := poolStats(t, sched)
	t.Logf("run: %d streams for %v (%.1fs with the tail): %d sent, %d complete, %d failed, %.0f req/s; peak %d goroutines",
		streams, duration, elapsed.Seconds(), r.sent.Load(), r.complete.Load(), r.failed.Load(), float64(r.complete.Load())/elapsed.Seconds(), peak.Load())
	t.Logf("scheduler after: in flight %d (tokens %d), queued %v, counters %+v", p.InFlight, p.InFlightTokens, p.Queued, p.Counters)
	if r.failed.Load() != 0 || r.complete.Load() != r.sent.Load() {
		t.Errorf("lost responses: %d sent, %d complete, %d failed, e.g. %q", r.sent.Load(), r.complete.Load(), r.failed.Load(), r.examples)
	}
	queued := 0
	for _, n := range p.Queued {
		queued += n
	}
	if p.InFlight != 0 || p.InFlightTokens != 0 || queued != 0 {
		t.Errorf("leaked scheduler capacity: in flight %d, tokens %d, queued %d", p.InFlight, p.InFlightTokens, queued)
	}
	if want := uint64(r.sent.Load() + warm.sent.Load()); p.Counters.Admitted != want || p.Counters.Done != want {
		t.Errorf("scheduler admitted %d and finished %d of %d requests", p.Counters.Admitted, p.Counters.Done, want)
	}

	// Flat afterwards: goroutines back to the baseline (a few timers may
	// still be winding down, so poll), live heap within 8 MiB of it.
	settle()
	after := measure()
	_ = wait.Poll{Timeout: 30 * time.Second, Interval: 200 * time.Millisecond}.Check("goroutines back to the baseline", func() error {
		if after.goroutines <= base.goroutines+10 {
			return nil
		}
		settle()
		after = measure()
		return errors.New("not yet")
	})
	t.Logf("after the run: %v (baseline %v)", after, base)
	if path := os.Getenv("LLMESH_SOAK_HEAPPROFILE"); path != "" {
		writeHeapProfile(t, path)
	}
	if after.goroutines > base.goroutines+10 {
		buf := make([]byte, 1<<20)
		t.Errorf("goroutines %d after the run, %d before: leak\n%s", after.goroutines, base.goroutines, buf[:runtime.Stack(buf, true)])
	}
	if after.heap > base.heap+8<<20 {
		t.Errorf("live heap %.1f MiB after the run, %.1f MiB before", float64(after.heap)/(1<<20), float64(base.heap)/(1<<20))
	}
}

// writeHeapProfile saves the live heap, to find what stays behind.
func writeHeapProfile(t *testing.T, path string) {
	f, err := os.Create(path)
	if err != nil {
		t.Errorf("heap profile: %v", err)
		return
	}
	defer f.Close()
	runtime.GC()
	if err := pprof.WriteHeapProfile(f); err != nil {
		t.Errorf("heap profile: %v", err)
	}
}

func poolStats(t *testing.T, s *scheduler.Scheduler) scheduler.PoolStats {
	t.Helper()
	for _, p := range s.Stats() {
		if p.Name == "sim" {
			return p
		}
	}
	t.Fatal("no pool sim")
	return scheduler.PoolStats{}
}
