package faults

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llmesh/llmesh/gateway"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/policy"
	"github.com/llmesh/llmesh/testkit/proctest"
)

func TestMain(m *testing.M) { proctest.Main(m) }

// wait is how long any condition may take to become true on a loaded
// machine; conditions are polled, never slept on.
const wait = 20 * time.Second

// poll waits for conditions for at most wait. Its short interval catches
// states that last only a moment, such as an engine still prefilling.
var poll = proctest.Poll{Timeout: wait, Interval: 5 * time.Millisecond}

// schedConfig is a scheduler for the pools "sim" (OpenAI) and "sim-grpc"
// with maxInflight slots each, an interactive and a batch class.
func schedConfig(t testing.TB, pol string, maxInflight int) scheduler.Config {
	t.Helper()
	p, err := policy.Lookup(pol)
	if err != nil {
		t.Fatal(err)
	}
	return scheduler.Config{
		Pools: []scheduler.PoolConfig{
			{Name: "sim", MaxInflight: maxInflight, Policy: p},
			{Name: "sim-grpc", MaxInflight: maxInflight, Policy: p},
		},
		Classes: []scheduler.ClassConfig{
			{Name: "interactive", Priority: 0},
			{Name: "batch", Priority: 10, Preemptible: true},
		},
		DefaultClass: "batch",
	}
}

func newScheduler(t testing.TB, pol string, maxInflight int) *scheduler.Scheduler {
	t.Helper()
	s, err := scheduler.New(schedConfig(t, pol, maxInflight), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// poolStats returns the named pool's snapshot.
func poolStats(t testing.TB, stats []scheduler.PoolStats, pool string) scheduler.PoolStats {
	t.Helper()
	for _, p := range stats {
		if p.Name == pool {
			return p
		}
	}
	t.Fatalf("no pool %q in %+v", pool, stats)
	return scheduler.PoolStats{}
}

func queued(p scheduler.PoolStats) int {
	n := 0
	for _, q := range p.Queued {
		n += q
	}
	return n
}

// idle reports whether a pool holds no capacity and queues nothing.
func idle(p scheduler.PoolStats) (bool, string) {
	return p.InFlight == 0 && p.InFlightTokens == 0 && p.Preempting == 0 && queued(p) == 0,
		fmt.Sprintf("in flight %d (tokens %d, preempting %d), queued %v, counters %+v", p.InFlight, p.InFlightTokens, p.Preempting, p.Queued, p.Counters)
}

// recorder collects the gateway's per-request records.
type recorder struct{ ch chan gateway.Record }

func newRecorder() *recorder { return &recorder{ch: make(chan gateway.Record, 4096)} }

func (r *recorder) Record(rec gateway.Record) { r.ch <- rec }

func (r *recorder) next(t testing.TB) gateway.Record {
	t.Helper()
	select {
	case rec := <-r.ch:
		return rec
	case <-time.After(wait):
		t.Fatalf("no gateway record within %v", wait)
	}
	return gateway.Record{}
}

// startGateway serves a gateway on 127.0.0.1:0 until the test ends and
// returns its base URL.
func startGateway(t testing.TB, cfg gateway.Config, opts ...gateway.Option) string {
	t.Helper()
	g, err := gateway.New(cfg, opts...)
	if err != nil {
		t.Fatalf("gateway.New: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	proctest.Go(t, "gateway Serve", func(ctx context.Context) error {
		err := g.Serve(ctx, ln, 5*time.Second)
		g.Close()
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return err
	})
	return "http://" + ln.Addr().String()
}

// pools is the gateway's view of one sim (or of a proxy in front of it).
func pools(httpURL, grpcAddr string) []gateway.Pool {
	ps := []gateway.Pool{{Name: "sim", Upstream: httpURL}}
	if grpcAddr != "" {
		ps = append(ps, gateway.Pool{Name: "sim-grpc", Protocol: gateway.GRPC, Upstream: "http://" + grpcAddr})
	}
	return ps
}

func completion(model string, maxTokens int, prompt string) string {
	return `{"model":"` + model + `","prompt":"` + prompt + `","max_tokens":` + strconv.Itoa(maxTokens) +
		`,"stream":true,"stream_options":{"include_usage":true}}`
}

// send posts a streamed completion with extra headers; the caller closes
// the body.
func send(ctx context.Context, url, body string, hdr map[string]string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/completions", strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	return http.DefaultClient.Do(req)
}

// sse is one event of a stream.
type sse struct{ event, data string }

// sseReader reads events one at a time.
type sseReader struct{ sc *bufio.Scanner }

func newSSEReader(r io.Reader) *sseReader {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	return &sseReader{sc: sc}
}

// next returns the next event; ok is false at the end of the stream.
func (r *sseReader) next() (e sse, ok bool) {
	for r.sc.Scan() {
		line := r.sc.Text()
		switch {
		case line == "":
			if e.data != "" || e.event != "" {
				return e, true
			}
		case strings.HasPrefix(line, "event:"):
			e.event = strings.TrimSpace(line[6:])
		case strings.HasPrefix(line, "data:"):
			e.data += strings.TrimSpace(line[5:])
		}
	}
	return e, e.data != ""
}

func readAll(r io.Reader) []sse {
	var out []sse
	rd := newSSEReader(r)
	for {
		e, ok := rd.next()
		if !ok {
			return out
		}
		out = append(out, e)
	}
}

// engineGauges reads the sim's running and waiting request gauges.
func engineGauges(url string) (running, waiting float64, err error) {
	res, err := http.Get(url + "/metrics")
	if err != nil {
		return 0, 0, err
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		line := sc.Text()
		for name, dst := range map[string]*float64{"vllm:num_requests_running": &running, "vllm:num_requests_waiting": &waiting} {
			if strings.HasPrefix(line, name+"{") || strings.HasPrefix(line, name+" ") {
				f := strings.Fields(line)
				v, perr := strconv.ParseFloat(f[len(f)-1], 64)
				if perr != nil {
					return 0, 0, fmt.Errorf("metric line %q: %v", line, perr)
				}
				*dst += v
			}
		}
	}
	return running, waiting, sc.Err()
}

// engineIdle polls until the sim runs and queues nothing.
func engineIdle(t testing.TB, url string) {
	t.Helper()
	engineIdleWithin(t, wait, url)
}

// cancelled is how soon an abandoned request must leave the engine: far
// less than the 2000-token streams the tests abandon would take to finish
// on their own on the real-time sim (2000 decode steps of at least 7.5 ms:
// `llmesh sim predict --decode-batch 1 --context 1000`), so an engine that
// goes idle within it was cancelled, not done.
const cancelled = 5 * time.Second

// engineIdleWithin polls until the sim runs and queues nothing, for at most
// limit.
func engineIdleWithin(t testing.TB, limit time.Duration, url string) {
	t.Helper()
	proctest.Poll{Timeout: limit, Interval: poll.Interval}.Until(t, "engine idle", func() (bool, string) {
		r, w, err := engineGauges(url)
		return err == nil && r == 0 && w == 0, fmt.Sprintf("running %v waiting %v err %v", r, w, err)
	})
}
