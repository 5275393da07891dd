package gateway

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmesh/llmesh/telemetry"
	"github.com/llmesh/llmesh/testkit/cputime"
)

// The process benchmark runs each proxy in a process of its own (this
// test binary, re-executed) and reads that process's CPU time, so what it
// reports is the proxy's own CPU per chunk: no client, upstream or
// benchmark work is mixed in, and no subtraction of a direct path is
// needed. The in-process BenchmarkProxyCPUPerChunk cannot separate them:
// there the cost of a socket write depends on whether its reader is
// asleep, and a proxy that changes the timing of the client and upstream
// moves their CPU too (run alone, its direct path has used more CPU per
// chunk than the proxied ones).

// benchProxyEnv names the proxy a re-executed test binary serves instead
// of running tests; benchUpstreamEnv is the upstream it proxies to.
const (
	benchProxyEnv    = "LLMESH_BENCH_PROXY"
	benchUpstreamEnv = "LLMESH_BENCH_UPSTREAM"
)

// The proxies the process benchmark compares.
const (
	procPlain     = "plain"             // httputil.ReverseProxy, flushing every write
	procGateway   = "gateway"           // the gateway without recorders
	procTelemetry = "gateway-telemetry" // the gateway recording OpenTelemetry metrics, as `llmesh gateway` does
)

// benchProxyMain serves the proxy named by benchProxyEnv on 127.0.0.1:0,
// writes its address as the first line of stdout, then answers each
// "cpu" line on stdin with the process's CPU time in nanoseconds, until
// stdin ends.
func benchProxyMain() int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "bench proxy:", err)
		return 1
	}
	kind, upstream := os.Getenv(benchProxyEnv), os.Getenv(benchUpstreamEnv)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fail(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	switch kind {
	case procPlain:
		u, err := url.Parse(upstream)
		if err != nil {
			return fail(err)
		}
		srv := &http.Server{Handler: newPlainReverseProxy(u)}
		go func() { done <- srv.Serve(ln) }()
		defer srv.Close()
	case procGateway, procTelemetry:
		var opts []Option
		if kind == procTelemetry {
			tele, err := telemetry.New(ctx, telemetry.Options{Prometheus: true})
			if err != nil {
				return fail(err)
			}
			defer func() { _ = tele.Shutdown(context.Background()) }()
			opts = append(opts, WithRecorder(telemetry.HostRecorder{R: tele.Recorder}))
		}
		g, err := New(Config{Pools: []Pool{{Name: "p", Upstream: upstream}}}, opts...)
		if err != nil {
			return fail(err)
		}
		defer g.Close()
		go func() { done <- g.Serve(ctx, ln, time.Second) }()
	default:
		return fail(fmt.Errorf("unknown %s %q", benchProxyEnv, kind))
	}
	fmt.Println(ln.Addr().String())
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		if sc.Text() == "cpu" {
			fmt.Println(int64(cputime.Process()))
		}
	}
	cancel()
	ln.Close()
	if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
		return fail(err)
	}
	return 0
}

// proxyProc is a proxy process started by startProxyProc.
type proxyProc struct {
	url string
	in  io.WriteCloser
	out *bufio.Reader
}

// startProxyProc re-executes the test binary as a proxy of kind in front
// of upstream; it stops when the benchmark ends.
func startProxyProc(tb testing.TB, kind, upstream string) *proxyProc {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), benchProxyEnv+"="+kind, benchUpstreamEnv+"="+upstream)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		in.Close()
		if err := cmd.Wait(); err != nil {
			tb.Errorf("%s proxy: %v", kind, err)
		}
	})
	p := &proxyProc{in: in, out: bufio.NewReader(out)}
	addr, err := p.out.ReadString('\n')
	if err != nil {
		tb.Fatalf("%s proxy did not start: %v", kind, err)
	}
	p.url = "http://" + strings.TrimSpace(addr)
	return p
}

// cpu is the proxy process's CPU time so far.
func (p *proxyProc) cpu(tb testing.TB) time.Duration {
	if _, err := io.WriteString(p.in, "cpu\n"); err != nil {
		tb.Fatal(err)
	}
	line, err := p.out.ReadString('\n')
	if err != nil {
		tb.Fatal(err)
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(line), 10, 64)
	if err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ns)
}

// BenchmarkProxyProcessCPU reports each proxy process's CPU per streamed
// chunk, and the gateway's over the plain ReverseProxy's, with the arms in
// a fresh random order every round:
//
//   - paced: 32 concurrent streams of 64 events 1 ms apart, the way
//     engines stream (every event is its own read and write in every
//     proxy);
//   - burst: one stream of 256 events written as fast as possible, where a
//     proxy's reads batch events as they pile up.
func BenchmarkProxyProcessCPU(b *testing.B) {
	b.Run("paced", func(b *testing.B) { benchProxyProcess(b, pacedUpstream(64, time.Millisecond), 32, 64) })
	b.Run("burst", func(b *testing.B) { benchProxyProcess(b, burstUpstream(256), 1, 256) })
}

func benchProxyProcess(b *testing.B, upstream http.HandlerFunc, streams, chunks int) {
	up := httptest.NewServer(upstream)
	b.Cleanup(up.Close) // after the proxies stop (cleanups run last first)
	kinds := []string{procPlain, procGateway, procTelemetry}
	procs := make([]*proxyProc, len(kinds))
	for j, k := range kinds {
		procs[j] = startProxyProc(b, k, up.URL)
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1024, DisableCompression: true}}
	b.Cleanup(client.CloseIdleConnections)
	round := func(base string) {
		var wg sync.WaitGroup
		errs := make(chan error, streams)
		for i := 0; i < streams; i++ {
			wg.Go(func() {
				req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions",
					strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}`))
				req.Header.Set("Content-Type", "application/json")
				res, err := client.Do(req)
				if err != nil {
					errs <- err
					return
				}
				defer res.Body.Close()
				n, err := io.Copy(io.Discard, res.Body)
				if err == nil && n < int64(chunks*len(benchChunk)) {
					err = fmt.Errorf("short response: %d bytes", n)
				}
				if err != nil {
					errs <- err
				}
			})
		}
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			b.Fatalf("N=%d via %s: %v", b.N, base, err)
		}
	}
	for _, p := range procs { // connections and buffers, before measuring
		round(p.url)
	}
	per := make([][]time.Duration, len(kinds)) // per round: CPU per chunk
	rng := rand.New(rand.NewPCG(3, 4))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, j := range rng.Perm(len(kinds)) {
			c0 := procs[j].cpu(b)
			round(procs[j].url)
			per[j] = append(per[j], (procs[j].cpu(b)-c0)/time.Duration(streams*chunks))
		}
	}
	b.StopTimer()
	med := make([]time.Duration, len(kinds))
	for j, k := range kinds {
		med[j], _ = percentiles(slices.Clone(per[j]))
		b.ReportMetric(float64(med[j]), k+"-cpu-ns/chunk")
	}
	if med[0] > 0 {
		b.ReportMetric(float64(med[1])/float64(med[0]), "gateway/plain")
		b.ReportMetric(float64(med[2])/float64(med[0]), "telemetry/plain")
	}
	// The same from each round's own pair, which a slow round (another
	// process on the machine, a GC cycle) moves for all arms alike.
	ratio := func(j int) float64 {
		r := make([]float64, len(per[0]))
		for i := range r {
			r[i] = float64(per[j][i]) / float64(max(per[0][i], 1))
		}
		slices.Sort(r)
		return r[len(r)/2]
	}
	b.ReportMetric(ratio(1), "gateway/plain-round-median")
	b.ReportMetric(ratio(2), "telemetry/plain-round-median")
}
