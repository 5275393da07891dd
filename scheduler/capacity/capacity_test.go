package capacity_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/llmesh/llmesh/clock"
	"github.com/llmesh/llmesh/scheduler/capacity"
	"github.com/llmesh/llmesh/testkit/wait"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const vllmText = `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="llama3-8b"} 12
vllm:num_requests_running{engine="1",model_name="llama3-8b"} 4
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="llama3-8b"} 3 1700000000000
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="we{ird\"}"} 0.5
vllm:kv_cache_usage_perc{engine="1",model_name="llama3-8b"} 0.75
vllm:num_requests_running_other 99
http_requests_total{code="200"} 1027
`

func TestParse(t *testing.T) {
	got, err := capacity.Parse([]byte(vllmText))
	if err != nil {
		t.Fatal(err)
	}
	want := capacity.Sample{Running: 16, Waiting: 3, KVUsage: 0.75, HasRunning: true, HasWaiting: true, HasKV: true}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", "none of"},
		{"other_metric 1\n", "none of"},
		{"vllm:num_requests_running abc\n", `line 1 (vllm:num_requests_running): bad value "abc"`},
		{"# x\nvllm:num_requests_waiting{a=\"b\" 3\n", "line 2 (vllm:num_requests_waiting): unterminated label set"},
		{"vllm:kv_cache_usage_perc NaN\n", "must be finite"},
		{"vllm:num_requests_running -1\n", "must be finite and not negative"},
		{"vllm:num_requests_running 1 2 3\n", "want a value"},
		{"vllm:num_requests_running\n", "want a value"},
	} {
		_, err := capacity.Parse([]byte(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %v, want error containing %q", tc.in, err, tc.want)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(vllmText))
	f.Add([]byte("vllm:num_requests_running 1\n"))
	f.Add([]byte("vllm:gpu_cache_usage_perc{x=\"\\\"}\"} 0.3 12\n"))
	f.Add([]byte("vllm:num_requests_waiting{} +Inf\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := capacity.Parse(data)
		if err != nil {
			return
		}
		if s.Running < 0 || s.Waiting < 0 || s.KVUsage < 0 || !(s.HasRunning || s.HasWaiting || s.HasKV) {
			t.Fatalf("accepted invalid sample %+v", s)
		}
		_ = capacity.Rule{Max: 8}.Next(4, s)
	})
}

func TestRule(t *testing.T) {
	r := capacity.Rule{Max: 32, Min: 2}
	for _, tc := range []struct {
		name string
		cur  int
		s    capacity.Sample
		want int
	}{
		{"room grows by max/8", 10, capacity.Sample{Running: 10, HasRunning: true, KVUsage: 0.3, HasKV: true}, 14},
		{"growth capped at max", 30, capacity.Sample{Running: 30, HasKV: true, KVUsage: 0.1}, 32},
		{"engine backlog: running plus slack", 32, capacity.Sample{Running: 20, Waiting: 9}, 24},
		{"just-admitted requests seen waiting are not a backlog", 20, capacity.Sample{Running: 20, Waiting: 3, HasKV: true, KVUsage: 0.5}, 24},
		{"kv full: hold at running", 32, capacity.Sample{Running: 24, KVUsage: 0.97, Waiting: 2, HasKV: true}, 24},
		{"never above current when backlogged", 10, capacity.Sample{Running: 20, Waiting: 7}, 10},
		{"floor", 10, capacity.Sample{Running: 0, Waiting: 30, HasKV: true, KVUsage: 0.99}, 2},
		{"between watermarks holds", 12, capacity.Sample{Running: 12, KVUsage: 0.9, HasKV: true}, 12},
	} {
		if got := r.Next(tc.cur, tc.s); got != tc.want {
			t.Errorf("%s: Next(%d, %+v) = %d, want %d", tc.name, tc.cur, tc.s, got, tc.want)
		}
	}
}

// limits records SetLimit calls.
type limits struct {
	mu  sync.Mutex
	got []int
}

func (l *limits) SetLimit(pool string, n int) error {
	if pool != "gpu" {
		return fmt.Errorf("unknown pool %q", pool)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.got = append(l.got, n)
	return nil
}

// engine is a loopback /metrics endpoint whose body and status tests set.
type engine struct {
	mu     sync.Mutex
	body   string
	status int
}

func (e *engine) set(status int, body string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.status, e.body = status, body
}

func (e *engine) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	e.mu.Lock()
	defer e.mu.Unlock()
	w.WriteHeader(e.status)
	fmt.Fprint(w, e.body)
}

func TestWatcherAdaptsAndFallsBack(t *testing.T) {
	eng := &engine{}
	eng.set(200, "vllm:num_requests_running 16\nvllm:num_requests_waiting 4\nvllm:kv_cache_usage_perc 0.99\n")
	srv := httptest.NewServer(eng)
	defer srv.Close()
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	tgt := &limits{}
	w, err := capacity.New(capacity.Config{Pool: "gpu", URL: srv.URL + "/metrics", Interval: time.Second, StaleAfter: 2500 * time.Millisecond,
		Rule: capacity.Rule{Max: 64}}, tgt, clk)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != context.Canceled {
			t.Errorf("Run: %v", err)
		}
	}()

	scrape := func(n int) capacity.Status {
		t.Helper()
		wait.UntilNil(t, fmt.Sprintf("scrape %d", n), func() error {
			st := w.Status()
			if st.Scrapes >= n {
				return nil
			}
			if clk.Timers() > 0 && st.Scrapes == n-1 {
				clk.Advance(time.Second)
			}
			return fmt.Errorf("status %+v", st)
		})
		return w.Status()
	}
	if st := scrape(1); st.Limit != 16 || st.Stale {
		t.Fatalf("saturated engine: %+v, want limit 16", st)
	}
	eng.set(200, "vllm:num_requests_running 16\nvllm:num_requests_waiting 0\nvllm:kv_cache_usage_perc 0.4\n")
	if st := scrape(2); st.Limit != 24 {
		t.Fatalf("room: limit %d, want 16+64/8=24", st.Limit)
	}
	eng.set(500, "boom")
	if st := scrape(3); st.Limit != 24 || st.Failures != 1 || st.Err == nil {
		t.Fatalf("one failure within stale_after keeps the limit: %+v", st)
	}
	if st := scrape(4); st.Limit != 24 || st.Stale {
		t.Fatalf("two failures, last good 2s ago: %+v", st)
	}
	if st := scrape(5); st.Limit != 64 || !st.Stale {
		t.Fatalf("stale: %+v, want static 64", st)
	}
	eng.set(200, "vllm:num_requests_running 8\nvllm:num_requests_waiting 20\n")
	if st := scrape(6); st.Limit != 16 || st.Stale {
		t.Fatalf("recovered into a backlog: %+v, want running 8 + slack 8 = 16", st)
	}
	tgt.mu.Lock()
	defer tgt.mu.Unlock()
	if diff := cmp.Diff([]int{16, 24, 64, 16}, tgt.got); diff != "" {
		t.Errorf("SetLimit calls (-want +got):\n%s", diff)
	}
}

func TestWatcherUnreachable(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close() // nothing listens there now
	tgt := &limits{}
	w, err := capacity.New(capacity.Config{Pool: "gpu", URL: url, Rule: capacity.Rule{Max: 5}}, tgt, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	wait.Until(t, "the first scrape", func() bool { return w.Status().Scrapes >= 1 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run returned %v, want context.Canceled", err)
	}
	if st := w.Status(); st.Limit != 5 || !st.Stale || st.Err == nil {
		t.Fatalf("unreachable engine: %+v, want static 5 and an error", st)
	}
}

func TestNewValidates(t *testing.T) {
	_, err := capacity.New(capacity.Config{Interval: -1}, nil, nil)
	for _, want := range []string{"pool must be set", "metrics.url", "interval", "max_inflight 0", "target"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("New() = %v, want mention of %q", err, want)
		}
	}
}
