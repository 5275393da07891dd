package gateway

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmesh/llmesh/sim/simtest"
	"github.com/llmesh/llmesh/telemetry"
	"github.com/llmesh/llmesh/testkit/cputime"
)

// benchChunk is a typical OpenAI chat streaming event.
const benchChunk = `data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,"model":"llama3-8b","choices":[{"index":0,"delta":{"content":" token"},"finish_reason":null}]}` + "\n\n"

// burstUpstream streams chunks events as fast as it can, flushing each.
func burstUpstream(chunks int) http.HandlerFunc { return pacedUpstream(chunks, 0) }

// pacedUpstream streams chunks events gap apart, flushing each, as an
// engine decoding one request does (per-request token gaps are
// milliseconds); a zero gap sends them as fast as it can.
func pacedUpstream(chunks int, gap time.Duration) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		f := w.(http.Flusher)
		for i := 0; i < chunks; i++ {
			if i > 0 && gap > 0 {
				time.Sleep(gap)
			}
			_, _ = io.WriteString(w, benchChunk)
			f.Flush()
		}
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	}
}

// plainProxy serves a bare httputil.ReverseProxy to target, the baseline
// the gateway is compared with.
func plainProxy(tb testing.TB, target string) string {
	tb.Helper()
	u, _ := url.Parse(target)
	srv := httptest.NewServer(newPlainReverseProxy(u))
	tb.Cleanup(srv.Close)
	return srv.URL
}

// newPlainReverseProxy is the plain proxy: httputil.ReverseProxy flushing
// every write, with the request body read before it is sent on, as the
// gateway does. Streamed as is, a body that the upstream finished reading
// only after it began answering breaks the response (net/http's HTTP/1
// server closes the inbound body when the response starts, the transport's
// final read of it fails and tears down the upstream connection mid-stream:
// golang/go#40747), and a plain arm that loses part of its streams
// measures less work than it should.
func newPlainReverseProxy(u *url.URL) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(u)
			body, err := io.ReadAll(pr.In.Body)
			if err != nil {
				body = nil
			}
			pr.Out.Body = io.NopCloser(bytes.NewReader(body))
			pr.Out.ContentLength = int64(len(body))
			pr.Out.GetBody = nil
		},
		FlushInterval: -1,
		Transport:     &http.Transport{MaxIdleConnsPerHost: 1024, DisableCompression: true},
	}
}

var benchClient = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true}}

func streamOnce(tb testing.TB, base string) {
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions",
		strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}`))
	req.Header.Set("Content-Type", "application/json")
	res, err := benchClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer res.Body.Close()
	if _, err := io.Copy(io.Discard, res.Body); err != nil {
		tb.Fatalf("%s: %v", base, err) // a cut stream would count as less work
	}
}

// generalScanGateway starts a gateway whose observers take the general
// JSON scan for every event: the measurement path as it was before the
// SSE fast path, for A/B comparison in the same run.
func generalScanGateway(tb testing.TB, upstream string) string {
	tb.Helper()
	_, gw := startGateway(tb, Config{Pools: []Pool{{Name: "p", Upstream: upstream}}}, withGeneralScan())
	return gw
}

// withGeneralScan sets the general JSON scan for every observer: the
// benchmarks' A/B switch, chosen at construction, never read per request.
func withGeneralScan() Option { return func(g *Gateway) { g.generalScan = true } }

// telemetryGateway starts a gateway that records every request into
// OpenTelemetry metrics with the Prometheus exporter, as `llmesh gateway`
// does. The returned timer holds how long each request's recording took.
func telemetryGateway(tb testing.TB, upstream string) (string, *recordTimer) {
	tb.Helper()
	tele, err := telemetry.New(context.Background(), telemetry.Options{Prometheus: true})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = tele.Shutdown(context.Background()) })
	rt := &recordTimer{next: telemetry.HostRecorder{R: tele.Recorder}}
	_, gw := startGateway(tb, Config{Pools: []Pool{{Name: "p", Upstream: upstream}}}, WithRecorder(rt))
	return gw, rt
}

// recordTimer times each Record of next in CPU time of the calling
// thread: the telemetry cost of one request measured where the gateway
// pays it, between requests whose streaming has evicted the recorder's
// state from the CPU caches. (Wall time would also count the next
// request's work on the other core's goroutines.)
type recordTimer struct {
	next Recorder
	mu   sync.Mutex
	took []time.Duration
}

func (t *recordTimer) Record(r Record) {
	runtime.LockOSThread() // the two clock reads on one thread
	start := cputime.Thread()
	t.next.Record(r)
	d := cputime.Thread() - start
	runtime.UnlockOSThread()
	t.mu.Lock()
	t.took = append(t.took, d)
	t.mu.Unlock()
}

func (t *recordTimer) reset() {
	t.mu.Lock()
	t.took = t.took[:0]
	t.mu.Unlock()
}

// median is the median recording time so far.
func (t *recordTimer) median() time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.took) == 0 {
		return 0
	}
	p50, _ := percentiles(slices.Clone(t.took))
	return p50
}

// BenchmarkProxyCPUPerChunk streams 256-chunk SSE responses directly, via
// a plain ReverseProxy, via the gateway, via a gateway whose observer
// takes the general JSON scan for every event (the path before the SSE
// fast path), and via a gateway recording OpenTelemetry metrics (as
// deployed), interleaved in one run in a fresh random order every round.
// It reports process CPU per chunk for each path plus each gateway's share
// over the plain proxy's: (gateway − direct) / (plain − direct).
// Everything runs in this process, so the per-path numbers include the
// client and upstream; the difference to the direct path is what each
// proxy costs.
func BenchmarkProxyCPUPerChunk(b *testing.B) { benchProxyCPU(b, 256, "chunk") }

// BenchmarkProxyCPUPerRequest is BenchmarkProxyCPUPerChunk with one-token
// responses: what each path costs per request (connection reuse, request
// parsing, classification, the observer's setup and finish, recording),
// which the per-chunk numbers spread over 256 chunks.
func BenchmarkProxyCPUPerRequest(b *testing.B) { benchProxyCPU(b, 1, "request") }

// benchProxyCPU runs the interleaved arms with chunks-event responses and
// reports CPU per unit: per chunk, or per request.
func benchProxyCPU(b *testing.B, chunks int, unit string) {
	div := chunks
	if unit == "request" {
		div = 1
	}
	up := httptest.NewServer(burstUpstream(chunks))
	defer up.Close()
	plain := plainProxy(b, up.URL)
	_, gw := startGateway(b, Config{Pools: []Pool{{Name: "p", Upstream: up.URL}}})
	general := generalScanGateway(b, up.URL)
	tele, timer := telemetryGateway(b, up.URL)
	names := []string{"direct", "plain", "gateway", "gateway-general", "gateway-telemetry"}
	paths := []string{up.URL, plain, gw, general, tele}
	for _, p := range paths { // warm connections
		streamOnce(b, p)
	}
	var cpu [5]time.Duration
	// over[j] holds, per round, path j's CPU minus the direct path's in
	// the same round: what the proxy cost on that round's response.
	var over [5][]time.Duration
	// teleOver holds, per round, the telemetry arm's CPU minus the
	// gateway arm's: what recording cost, paired within the round.
	var teleOver []time.Duration
	rng := rand.New(rand.NewPCG(1, 2))
	timer.reset()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var round [5]time.Duration
		// A fresh order each round: with a rotation every path always
		// followed the same one, and the previous path's leftovers (its
		// handler's tail, the garbage it left for the collector) landed
		// on the same successor every time.
		for _, j := range rng.Perm(len(paths)) {
			c0 := cputime.Process()
			streamOnce(b, paths[j])
			round[j] = cputime.Process() - c0
			cpu[j] += round[j]
		}
		for j := 1; j < len(paths); j++ {
			over[j] = append(over[j], round[j]-round[0])
		}
		teleOver = append(teleOver, round[4]-round[2])
	}
	b.StopTimer()
	// Telemetry's own cost per chunk, two ways: the median paired
	// difference of the two gateway arms' CPU, and the median thread CPU
	// time of the Record call itself (per request, and spread over its
	// chunks).
	teleMed, _ := percentiles(teleOver)
	b.ReportMetric(float64(teleMed)/float64(div), "telemetry-minus-gateway-cpu-ns/"+unit)
	b.ReportMetric(float64(timer.median())/float64(time.Microsecond), "record-us/request")
	if unit == "chunk" {
		b.ReportMetric(float64(timer.median())/float64(chunks), "record-ns/chunk")
	}
	per := func(d time.Duration) float64 { return float64(d) / float64(b.N*div) }
	for j, name := range names {
		b.ReportMetric(per(cpu[j]), name+"-cpu-ns/"+unit)
	}
	if extra := per(cpu[1] - cpu[0]); extra > 0 {
		b.ReportMetric(per(cpu[2]-cpu[0])/extra, "gateway/plain-proxy-cpu")
		b.ReportMetric(per(cpu[3]-cpu[0])/extra, "general/plain-proxy-cpu")
		b.ReportMetric(per(cpu[4]-cpu[0])/extra, "telemetry/plain-proxy-cpu")
	}
	// The same ratios from the per-round medians, which a few rounds that
	// a loaded machine slowed down (or a GC cycle that landed in one path)
	// do not move.
	var med [5]time.Duration
	for j := 1; j < len(paths); j++ {
		med[j], _ = percentiles(over[j])
	}
	if med[1] > 0 {
		b.ReportMetric(float64(med[2])/float64(med[1]), "gateway/plain-median")
		b.ReportMetric(float64(med[3])/float64(med[1]), "general/plain-median")
		b.ReportMetric(float64(med[4])/float64(med[1]), "telemetry/plain-median")
	}
}

// BenchmarkProxyCPUAlone streams 256-chunk SSE responses through one path
// per sub-benchmark (direct, plain ReverseProxy, gateway) and reports the
// process's CPU per chunk: the paths of BenchmarkProxyCPUPerChunk run
// apart, which shows how much a path moves the client's and upstream's
// CPU (the direct path can use more than a proxied one).
func BenchmarkProxyCPUAlone(b *testing.B) {
	const chunks = 256
	for _, path := range []string{"direct", "plain", "gateway"} {
		b.Run(path, func(b *testing.B) {
			up := httptest.NewServer(burstUpstream(chunks))
			defer up.Close()
			base := up.URL
			switch path {
			case "plain":
				base = plainProxy(b, up.URL)
			case "gateway":
				_, base = startGateway(b, Config{Pools: []Pool{{Name: "p", Upstream: up.URL}}})
			}
			streamOnce(b, base)
			b.ResetTimer()
			c0 := cputime.Process()
			for i := 0; i < b.N; i++ {
				streamOnce(b, base)
			}
			b.ReportMetric(float64(cputime.Process()-c0)/float64(b.N*chunks), "cpu-ns/chunk")
		})
	}
}

// firstChunkUpstream answers with one token event at once and then holds
// the stream open briefly, like an engine with a zero-length prefill.
func firstChunkUpstream(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "text/event-stream")
	_, _ = io.WriteString(w, benchChunk)
	w.(http.Flusher).Flush()
	_, _ = io.WriteString(w, "data: [DONE]\n\n")
}

// ttftOnce is the client-side time from sending the request to reading
// the first event.
func ttftOnce(tb testing.TB, base string) time.Duration {
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions",
		strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}`))
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	res, err := benchClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	br := bufio.NewReader(res.Body)
	if _, err := br.ReadString('\n'); err != nil {
		tb.Fatal(err)
	}
	d := time.Since(start)
	_, _ = io.Copy(io.Discard, br)
	res.Body.Close()
	return d
}

func percentiles(d []time.Duration) (p50, p99 time.Duration) {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return pct(d, 0.5), pct(d, 0.99)
}

// BenchmarkAddedTTFT measures client TTFT directly, via a plain
// ReverseProxy and via the gateway, interleaved, and reports p50/p99 of
// each and what the gateway adds over the plain proxy.
func BenchmarkAddedTTFT(b *testing.B) {
	up := httptest.NewServer(http.HandlerFunc(firstChunkUpstream))
	defer up.Close()
	plain := plainProxy(b, up.URL)
	_, gw := startGateway(b, Config{Pools: []Pool{{Name: "p", Upstream: up.URL}}})
	paths := []string{up.URL, plain, gw}
	for _, p := range paths {
		ttftOnce(b, p)
	}
	samples := make([][]time.Duration, 3)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j, p := range paths {
			samples[j] = append(samples[j], ttftOnce(b, p))
		}
	}
	b.StopTimer()
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	var p50s, p99s [3]time.Duration
	for j, name := range []string{"direct", "plain", "gateway"} {
		p50s[j], p99s[j] = percentiles(samples[j])
		b.ReportMetric(us(p50s[j]), name+"-p50-us")
		b.ReportMetric(us(p99s[j]), name+"-p99-us")
	}
	b.ReportMetric(us(p50s[2]-p50s[1]), "added-p50-us")
	b.ReportMetric(us(p99s[2]-p99s[1]), "added-p99-us")
}

// BenchmarkFidelity sends streamed requests to a real-time sim, through
// the gateway and directly, alternating which goes first, and reports the
// p50/p99/max of (measured TTFT − the engine's own arrival→first-token
// time): for the gateway its recorded upstream TTFT, for the direct client
// its own TTFT. The direct numbers are the floor that the sim's delivery,
// loopback and the host add; gateway-minus-direct is what the gateway's
// measurement adds on top (goal: gateway-diff-p99-us ≤ 500). It fails if
// the gateway's output tokens ever differ from the usage the client got.
// Each op is one request per path.
func BenchmarkFidelity(b *testing.B) {
	s := simtest.Start(b, simtest.WithTimeScale(1))
	rec := newRecorder()
	_, gw := startGateway(b, Config{Pools: []Pool{{Name: "sim", Upstream: s.HTTPURL}}}, WithRecorder(rec))
	var gwDiff, directDiff []time.Duration
	body := func(i int) string {
		return `{"model":"` + s.Model + `","prompt":"fidelity ` + strconv.Itoa(i) + `","max_tokens":2,"stream":true,"stream_options":{"include_usage":true}}`
	}
	viaGateway := func(i int) {
		res := post(b, context.Background(), gw+"/v1/completions", body(i))
		datas, _ := readSSE(b, res)
		res.Body.Close()
		r := rec.next(b)
		_, _, usage := streamText(b, datas)
		if !r.OK() || !r.Engine.Seen || r.OutputTokens != usage["completion_tokens"] {
			b.Fatalf("gateway run %d: ok=%v (%q) engine=%v tokens %d vs %d", i, r.OK(), r.Error, r.Engine.Seen, r.OutputTokens, usage["completion_tokens"])
		}
		gwDiff = append(gwDiff, r.UpstreamTTFT-r.Engine.TTFT())
	}
	direct := func(i int) {
		d, err := directTTFTvsEngine(s.HTTPURL, body(i))
		if err != nil {
			b.Fatal(err)
		}
		directDiff = append(directDiff, d)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%2 == 0 {
			viaGateway(i)
			direct(i)
		} else {
			direct(i)
			viaGateway(i)
		}
	}
	b.StopTimer()
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	gp50, gp99 := percentiles(gwDiff)
	dp50, dp99 := percentiles(directDiff)
	b.ReportMetric(us(gp50), "gateway-diff-p50-us")
	b.ReportMetric(us(gp99), "gateway-diff-p99-us")
	b.ReportMetric(us(gwDiff[len(gwDiff)-1]), "gateway-diff-max-us")
	b.ReportMetric(us(dp50), "direct-diff-p50-us")
	b.ReportMetric(us(dp99), "direct-diff-p99-us")
	b.ReportMetric(us(gp50-dp50), "gateway-minus-direct-p50-us")
	b.ReportMetric(us(gp99-dp99), "gateway-minus-direct-p99-us")
}

// directTTFTvsEngine measures one request's client TTFT directly against
// the sim and subtracts the engine's own TTFT from its llmesh_engine object.
func directTTFTvsEngine(base, body string) (time.Duration, error) {
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	res, err := benchClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	var first time.Duration
	var arrival, firstTok int64
	for sc.Scan() {
		line := sc.Text()
		if first == 0 && strings.Contains(line, `"text":" `) {
			first = time.Since(start)
		}
		if i := strings.Index(line, `"arrival_ns":`); i >= 0 {
			_, _ = fmt.Sscanf(line[i:], `"arrival_ns":%d`, &arrival)
		}
		if i := strings.Index(line, `"first_token_ns":`); i >= 0 {
			_, _ = fmt.Sscanf(line[i:], `"first_token_ns":%d`, &firstTok)
		}
	}
	if first == 0 || arrival == 0 || firstTok == 0 {
		return 0, errors.New("direct run: no token or no llmesh_engine object")
	}
	return first - time.Duration(firstTok-arrival), nil
}

// eventReader hands out one SSE event per Read, n times, like a loopback
// engine that flushes every event.
type eventReader struct{ n int }

func (e *eventReader) Read(p []byte) (int, error) {
	if e.n == 0 {
		return 0, io.EOF
	}
	e.n--
	return copy(p, benchChunk), nil
}

// BenchmarkStreamPerChunk is the gateway's own work per streamed chunk,
// without sockets: read into the proxy's buffer, framing check, clock,
// idle bookkeeping, observation. One op is one chunk.
func BenchmarkStreamPerChunk(b *testing.B) { benchStreamPerChunk(b) }

// BenchmarkStreamPerChunkGeneral is BenchmarkStreamPerChunk with the
// observer on the general JSON scan (the path before the SSE fast path).
func BenchmarkStreamPerChunkGeneral(b *testing.B) {
	benchStreamPerChunk(b, withGeneralScan())
}

func benchStreamPerChunk(b *testing.B, opts ...Option) {
	g, err := New(Config{Pools: []Pool{{Name: "p", Upstream: "127.0.0.1:1"}}}, opts...)
	if err != nil {
		b.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, "http://gw/v1/chat/completions", nil)
	x := g.newExchange(g.cfg.Load(), g.cfg.Load().httpPool, req, g.clock.Now(), nil, "", false)
	res := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}},
		Body: io.NopCloser(&eventReader{n: b.N + 1}), Request: req}
	a := x.newAttempt(context.Background())
	s := newStream(x, a, nil, req, res)
	if err := s.prime(); err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 32<<10)
	b.ReportAllocs()
	b.ResetTimer()
	c0 := cputime.Process()
	for {
		if _, err := s.Read(buf); err != nil {
			break
		}
	}
	cpu := cputime.Process() - c0
	b.StopTimer()
	// CPU time, unlike ns/op, does not count time the machine gave to
	// other processes.
	b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/chunk")
	s.Close()
	x.finish()
}
