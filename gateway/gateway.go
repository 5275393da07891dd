package gateway

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llmesh/llmesh/clock"
	"github.com/llmesh/llmesh/exchange"
	"github.com/llmesh/llmesh/exchange/relocate"
	"github.com/llmesh/llmesh/gateway/relocatehttp"
	"github.com/llmesh/llmesh/scheduler"
)

// Recorder receives one Record per finished request (telemetry, tests,
// the benchmark's embedded runs): the core's recorder, the same the Envoy
// host reports to. It is called on the request's goroutine, so it must be
// quick and safe for concurrent use.
type Recorder = exchange.Recorder

// RecorderFunc adapts a function to Recorder.
type RecorderFunc = exchange.RecorderFunc

// Option configures a Gateway.
type Option func(*Gateway)

// WithAdmitter schedules every request through a (nil: requests go
// straight to the upstream, unscheduled).
func WithAdmitter(a scheduler.Admitter) Option { return func(g *Gateway) { g.admitter = a } }

// WithClock sets the clock used for measurements and idle timeouts (nil:
// the wall clock).
func WithClock(c clock.Clock) Option {
	return func(g *Gateway) {
		if c != nil {
			g.clock = c
		}
	}
}

// WithClassifier classifies requests (nil: a request's class is its
// route's class, and the scheduler's default class when the route has none).
func WithClassifier(c *exchange.Classifier) Option {
	return func(g *Gateway) { g.classifier.Store(c) }
}

// WithRecorder adds a recorder of finished requests (nil is ignored). A
// recorder with a GapBuckets() *exchange.GapBuckets method (the first such)
// gets every inter-chunk gap of a request counted by that layout
// (exchange.Options.GapBuckets), not only the bounded samples.
func WithRecorder(r Recorder) Option {
	return func(g *Gateway) {
		if r != nil {
			g.recorders = append(g.recorders, r)
			if gb, ok := r.(interface{ GapBuckets() *exchange.GapBuckets }); ok && g.gapBuckets == nil {
				g.gapBuckets = gb.GapBuckets()
			}
		}
	}
}

// WithAdminToken requires token ("Authorization: Bearer <token>") of the
// admin requests that change state (ServeAdmin, adminapi.Guard); "" (the
// default) requires none.
func WithAdminToken(token string) Option { return func(g *Gateway) { g.adminToken = token } }

// WithLogger sets the logger (nil: slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return func(g *Gateway) {
		if l != nil {
			g.log = l
		}
	}
}

// WithRelocation moves oversized prompts from headers and gRPC metadata
// into the body (gateway/relocatehttp) before the handler reads the
// request; rel is used for every request (a nil rel relocates nothing).
// A request the relocation refuses is answered with the core's reply
// (exchange.ReplyFor) and recorded like any other refusal. onRelocated is
// called per relocated value; nil does nothing.
func WithRelocation(rel *relocate.Relocator, onRelocated relocate.OnRelocated) Option {
	return func(g *Gateway) { g.relocator, g.onRelocated = rel, onRelocated }
}

// WithArmDraw sets the source of the uniform [0, 1) numbers that pick an
// experiment arm by weight; it is called once per request to a route with
// an experiment, from many goroutines at once, so it must be safe for
// concurrent use. nil: math/rand/v2's Float64. Tests pass a seeded source.
func WithArmDraw(draw func() float64) Option { return func(g *Gateway) { g.armDraw = draw } }

// bufferPool recycles ReverseProxy's 32 KiB copy buffers, which would
// otherwise be allocated per request.
type bufferPool struct{ p sync.Pool }

func (b *bufferPool) Get() []byte {
	if v, ok := b.p.Get().(*[]byte); ok {
		return *v
	}
	return make([]byte, 32<<10)
}

func (b *bufferPool) Put(buf []byte) {
	if cap(buf) == 32<<10 {
		buf = buf[:cap(buf)]
		b.p.Put(&buf)
	}
}

var copyBuffers = &bufferPool{}

// Gateway is the embedded data plane: an HTTP/1.1 and h2c server that
// proxies OpenAI-compatible and gRPC requests to pools, measures every
// stream, and schedules requests through an Admitter. Its configuration is
// swapped live with Update.
type Gateway struct {
	cfg        atomic.Pointer[compiled]
	classifier atomic.Pointer[exchange.Classifier]
	admitter   scheduler.Admitter
	clock      clock.Clock
	log        *slog.Logger
	adminToken string // WithAdminToken
	recorders  []Recorder
	gapBuckets *exchange.GapBuckets // from a recorder; nil: none
	handler    http.Handler
	// relocator, when set, relocates prompts in front of the handler.
	relocator   *relocate.Relocator
	onRelocated relocate.OnRelocated
	armDraw     func() float64 // nil: compile's default
	// generalScan makes every observer take the general JSON scan for
	// every SSE event (exchange.Options.GeneralScan); set at construction by
	// benchmarks that compare it with the fast path in one run.
	generalScan bool

	httpTransport *http.Transport
	grpcTransport *http.Transport

	mu      sync.Mutex
	proxies map[string]*httputil.ReverseProxy // by upstream URL and protocol
	ready   atomic.Bool

	// misuses counts lifecycle calls a request's state refused
	// (exchange.ExchangeConfig.Misuse), each a gateway bug; onMisuse,
	// made once in New, counts and logs them. Tests require none.
	misuses  atomic.Int64
	onMisuse func(call string, s exchange.State)

	// retries counts requests sent once more on another admission after a
	// failure before any byte reached the client (retry.go).
	retries atomic.Uint64
	// migrations counts streams continued on another endpoint after a cut
	// (migrate.go).
	migrations atomic.Uint64
	// bodies counts buffered request body bytes (limits.go).
	bodies budget
	// refusedConns counts connections closed on accept, over
	// Limits.MaxConnsPerClient.
	refusedConns atomic.Uint64
}

// Retries is how many requests were sent once more after their upstream
// failed before any byte reached the client (retry.go).
func (g *Gateway) Retries() uint64 { return g.retries.Load() }

// Migrations is how many streams were continued on another endpoint after
// their upstream connection failed mid-response (migrate.go).
func (g *Gateway) Migrations() uint64 { return g.migrations.Load() }

// New validates cfg and builds a Gateway; it listens on nothing until Serve.
func New(cfg Config, opts ...Option) (*Gateway, error) {
	g := &Gateway{clock: clock.Real{}, log: slog.Default(), proxies: map[string]*httputil.ReverseProxy{}}
	for _, o := range opts {
		o(g)
	}
	c, err := compile(cfg, g.armDraw)
	if err != nil {
		return nil, err
	}
	g.onMisuse = func(call string, s exchange.State) {
		g.misuses.Add(1)
		g.log.Error("request lifecycle call refused", "call", call, "state", s.String())
	}
	g.cfg.Store(c)
	g.httpTransport = &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        1024,
		MaxIdleConnsPerHost: 1024,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
	}
	g.grpcTransport = &http.Transport{
		DialContext:        (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		DisableCompression: true,
		IdleConnTimeout:    90 * time.Second,
		Protocols:          new(http.Protocols),
	}
	g.grpcTransport.Protocols.SetUnencryptedHTTP2(true)
	var h http.Handler = g
	if g.relocator != nil {
		h = relocatehttp.New(h, g.relocator, relocatehttp.Options{OnRelocated: g.onRelocated, OnRefused: g.relocationRefused})
	}
	g.handler = h
	g.ready.Store(true)
	return g, nil
}

// Update swaps in a new configuration; requests in flight finish with the
// old one. On error the running configuration stays.
func (g *Gateway) Update(cfg Config) error {
	c, err := compile(cfg, g.armDraw)
	if err != nil {
		return err
	}
	g.cfg.Store(c)
	return nil
}

// Arm returns the experiment and arm that the pool called pool carries in
// the running configuration ("" and "" for an ordinary or unknown pool),
// for labelling a Record.
func (g *Gateway) Arm(pool string) (experiment, arm string) {
	if p := g.cfg.Load().pools[pool]; p != nil {
		return p.Experiment, p.Arm
	}
	return "", ""
}

// SetClassifier swaps the classifier (nil: route classes only).
func (g *Gateway) SetClassifier(c *exchange.Classifier) { g.classifier.Store(c) }

// Handler is the data-plane handler (with the relocation), for hosts that run
// their own server (Serve uses it).
func (g *Gateway) Handler() http.Handler { return g.handler }

// proxy returns the ReverseProxy for a pool, built once per upstream.
func (g *Gateway) proxy(p *compiledPool) *httputil.ReverseProxy {
	key := string(p.Protocol) + " " + p.url.String()
	g.mu.Lock()
	defer g.mu.Unlock()
	if rp, ok := g.proxies[key]; ok {
		return rp
	}
	base := http.RoundTripper(g.httpTransport)
	if p.Protocol == GRPC {
		base = g.grpcTransport
	}
	target := p.url
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = target.Host
			// The client's address is not forwarded: engines need none,
			// and X-Forwarded-For from clients must not be trusted.
			x, ok := pr.In.Context().Value(exchangeKey{}).(*clientExchange)
			if !ok {
				return
			}
			for _, h := range x.rt.cfg.DropHeaders {
				pr.Out.Header.Del(h)
			}
			if x.pool.Protocol == OpenAI && !x.pool.PassAcceptEncoding {
				// Ask for what the observer can read; DisableCompression on
				// the transport only stops Go from asking for gzip itself.
				pr.Out.Header.Set("Accept-Encoding", "identity")
			}
		},
		Transport:     &attemptTransport{base: base},
		FlushInterval: -1,
		BufferPool:    copyBuffers,
		ErrorHandler:  g.errorHandler,
		ErrorLog:      slog.NewLogLogger(g.log.Handler(), slog.LevelDebug),
	}
	g.proxies[key] = rp
	return rp
}

func (g *Gateway) record(r Record) {
	for _, rec := range g.recorders {
		rec.Record(r)
	}
}

// Serve serves the data plane on ln until ctx ends, then drains: new
// connections are refused and requests in flight get drain to finish
// before their connections are closed. It returns nil after a clean
// shutdown.
func (g *Gateway) Serve(ctx context.Context, ln net.Listener, drain time.Duration) error {
	cfg := g.cfg.Load().cfg
	lim := cfg.Limits
	srv := &http.Server{
		Handler:           g.handler,
		MaxHeaderBytes:    cfg.MaxHeaderBytes,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       max(0, lim.ClientIdleTimeout),
		Protocols:         new(http.Protocols),
		HTTP2:             &http.HTTP2Config{MaxConcurrentStreams: max(0, lim.MaxStreamsPerConn)},
		ErrorLog:          slog.NewLogLogger(g.log.Handler(), slog.LevelDebug),
	}
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	ln = limitClients(ln, lim.MaxConnsPerClient, &g.refusedConns)
	return serveUntil(ctx, srv, ln, drain, func() { g.ready.Store(false) })
}

// serveUntil runs srv on ln and shuts it down gracefully when ctx ends.
func serveUntil(ctx context.Context, srv *http.Server, ln net.Listener, drain time.Duration, onStop func()) error {
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	if onStop != nil {
		onStop()
	}
	sctx, cancel := context.WithTimeout(context.Background(), drain)
	defer cancel()
	err := srv.Shutdown(sctx)
	if errors.Is(err, context.DeadlineExceeded) {
		err = srv.Close()
	}
	if serr := <-errc; serr != nil && !errors.Is(serr, http.ErrServerClosed) {
		return serr
	}
	return err
}

// Close releases idle upstream connections.
func (g *Gateway) Close() {
	g.httpTransport.CloseIdleConnections()
	g.grpcTransport.CloseIdleConnections()
}
