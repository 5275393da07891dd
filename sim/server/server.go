package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/llmesh/llmesh/api/llmv1"
	"github.com/llmesh/llmesh/api/vllmpb"
	"github.com/llmesh/llmesh/clock"
	"github.com/llmesh/llmesh/kvblock"
	"github.com/llmesh/llmesh/sim"
)

// Config configures a simulated engine server. Zero fields take the
// defaults named.
type Config struct {
	// Profile names the built-in model profile (default sim.DefaultProfile).
	Profile string
	// ServedModelName is the model name clients must use (default: the
	// profile's name). Requests without a model get it.
	ServedModelName string
	// Engine sizes the engine model (zero fields: the engine's defaults).
	Engine sim.Config
	// Clock drives the engine loop and timestamps (nil: the wall clock).
	// clock.Scaled gives --time-scale.
	Clock clock.Clock
	// Seed seeds synthetic tokens (a request's own seed overrides it) and
	// random fault draws.
	Seed uint64
	// FaultRate is the share of requests that get a random fault drawn from
	// FaultKinds (entries as ParseFaults reads them). 0 disables.
	FaultRate  float64
	FaultKinds []string
	// DefaultMaxTokens applies when a request gives no max_tokens
	// (default 16, as vLLM's completions endpoint).
	DefaultMaxTokens int
	// Quirks names engine quirks to reproduce (see ParseQuirks; nil:
	// none, the sim behaves as vLLM does).
	Quirks []string
	// Logger gets request errors (nil: discarded).
	Logger *slog.Logger
	// KVEvents, when set, gets the engine's KV-cache events (vLLM's
	// BlockStored and BlockRemoved), a batch per step that changed the
	// prefix cache (kvevents.go). Nil: none are made. Nothing is published
	// with prefix caching off.
	KVEvents KVEventPublisher
}

// Server is a simulated engine: one engine model driven by one loop
// goroutine, served over OpenAI-compatible HTTP and two gRPC services.
type Server struct {
	cfg     Config
	profile *sim.Profile
	clk     clock.Clock
	loop    *loop
	metrics *metrics
	faults  *injector
	quirks  Quirks
	log     *slog.Logger
	nextID  atomic.Uint64 // engine sequence ids
	respID  atomic.Uint64 // response ids
	created int64

	running atomic.Bool
}

// Errors the request paths map to status codes.
var (
	errStopped = errors.New("simulated engine stopped")
	errDropped = errors.New("simulated connection drop")
)

// New validates cfg and builds a server; Run or Serve starts it.
func New(cfg Config) (*Server, error) {
	var errs []error
	if cfg.Profile == "" {
		cfg.Profile = sim.DefaultProfile
	}
	p, err := sim.LookupProfile(cfg.Profile)
	if err != nil {
		errs = append(errs, fmt.Errorf("profile: %w", err))
	}
	if cfg.DefaultMaxTokens < 0 {
		errs = append(errs, fmt.Errorf("default max tokens: %d must not be negative", cfg.DefaultMaxTokens))
	}
	if cfg.DefaultMaxTokens == 0 {
		cfg.DefaultMaxTokens = 16
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	inj, err := newInjector(cfg.FaultRate, cfg.FaultKinds, cfg.Seed)
	if err != nil {
		errs = append(errs, err)
	}
	quirks, err := ParseQuirks(cfg.Quirks)
	if err != nil {
		errs = append(errs, fmt.Errorf("quirks: %w", err))
	}
	var eng *sim.Engine
	if p != nil {
		if cfg.ServedModelName == "" {
			cfg.ServedModelName = p.Name
		}
		eng, err = sim.NewEngine(p, cfg.Engine)
		if err != nil {
			errs = append(errs, fmt.Errorf("engine: %w", err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	cfg.Engine = eng.Config()
	m := newMetrics(cfg.ServedModelName)
	s := &Server{cfg: cfg, profile: p, clk: cfg.Clock, metrics: m, faults: inj, quirks: quirks, log: cfg.Logger, created: cfg.Clock.Now().Unix()}
	s.loop = newLoop(cfg.Clock, eng, m)
	if cfg.KVEvents != nil && !cfg.Engine.DisablePrefixCaching {
		s.loop.blocks = &blockEvents{pub: cfg.KVEvents}
		eng.SetBlockEvents(s.loop.blocks)
	}
	return s, nil
}

// Pace reports how the engine loop has kept to the timing model so far.
// Safe to call while the server runs.
func (s *Server) Pace() Pace { return s.loop.snapshotPace() }

// Config is the server's configuration with defaults filled in.
func (s *Server) Config() Config { return s.cfg }

// Run drives the engine until ctx ends; requests in flight then fail. It
// must run (once) for requests to make progress.
func (s *Server) Run(ctx context.Context) {
	if !s.running.CompareAndSwap(false, true) {
		panic("sim/server: Run called twice")
	}
	s.loop.run(ctx)
}

// Serve runs the engine loop, HTTP on httpLn and, if grpcLn is not nil,
// gRPC on grpcLn, until ctx ends; then it stops the engine (failing
// requests in flight) and the servers, and returns. It returns early with
// an error if a listener fails.
func (s *Server) Serve(ctx context.Context, httpLn, grpcLn net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	hs := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	gs := grpc.NewServer()
	s.RegisterGRPC(gs)

	var wg sync.WaitGroup
	errc := make(chan error, 2)
	loopDone := make(chan struct{})
	go func() {
		defer close(loopDone)
		s.Run(ctx)
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := hs.Serve(httpLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("http: %w", err)
		}
	}()
	if grpcLn != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := gs.Serve(grpcLn); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
				errc <- fmt.Errorf("grpc: %w", err)
			}
		}()
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	cancel()
	<-loopDone // streams in flight now fail fast
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	if e := hs.Shutdown(sctx); e != nil {
		hs.Close()
	}
	stopped := make(chan struct{})
	go func() {
		gs.GracefulStop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-sctx.Done():
		gs.Stop()
		<-stopped
	}
	wg.Wait()
	return err
}

// RegisterGRPC registers llm.v1.Generation and vllm.grpc.engine.VllmEngine.
func (s *Server) RegisterGRPC(r grpc.ServiceRegistrar) {
	llmv1.RegisterGenerationServer(r, &generationService{s: s})
	vllmpb.RegisterVllmEngineServer(r, &vllmService{s: s})
}

// genRequest is a validated request in engine terms.
type genRequest struct {
	prompt    []uint32
	maxTokens int
	priority  int
	seed      uint64
	fault     Fault
	// perToken: the protocol writes one chunk per token (OpenAI SSE), not
	// one per emitted batch (gRPC), which a drop fault counts by.
	perToken bool
}

// requestError is a client error with the parameter it concerns; HTTP maps
// it to 400 (or Status), gRPC to InvalidArgument (or NotFound).
type requestError struct {
	Status int
	Param  string
	Msg    string
}

func (e *requestError) Error() string { return e.Msg }

func badRequest(param, format string, args ...any) *requestError {
	return &requestError{Status: http.StatusBadRequest, Param: param, Msg: fmt.Sprintf(format, args...)}
}

// checkModel resolves the requested model name.
func (s *Server) checkModel(model string) error {
	if model == "" || model == s.cfg.ServedModelName {
		return nil
	}
	return &requestError{Status: http.StatusNotFound, Param: "model", Msg: fmt.Sprintf("The model `%s` does not exist.", model)}
}

// checkSize applies the model's context and the cache's size to a request,
// with vLLM's wording.
func (s *Server) checkSize(prompt, maxTokens int) error {
	ml := s.cfg.Engine.MaxModelLen
	switch {
	case prompt < 1:
		return badRequest("prompt", "prompt must contain at least one token")
	case prompt >= ml:
		return badRequest("prompt", "This model's maximum context length is %d tokens. However, your request has %d input tokens. Please reduce the length of the input messages.", ml, prompt)
	case maxTokens < 1:
		return badRequest("max_tokens", "max_tokens must be at least 1, got %d.", maxTokens)
	case prompt+maxTokens > ml:
		return badRequest("max_tokens", "This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the messages, %d in the completion). Please reduce the length of the messages or completion.", ml, prompt+maxTokens, prompt, maxTokens)
	case (prompt+1+sim.BlockSize-1)/sim.BlockSize > s.cfg.Engine.KVCacheTokens/sim.BlockSize:
		return badRequest("prompt", "prompt of %d tokens does not fit the KV cache of %d tokens", prompt, s.cfg.Engine.KVCacheTokens)
	}
	return nil
}

// result is how a generation ended, with the engine's ground truth.
type result struct {
	snapshot
	arrival time.Time
	ids     []uint32 // all output ids
}

// abort removes a sequence whose client went away, unless the no-abort
// quirk keeps it generating (its tokens then go nowhere).
func (s *Server) abort(id uint64) {
	if s.quirks.Has(QuirkNoAbort) {
		return
	}
	s.loop.abort(id)
}

// generate runs req through the engine, calling emit with each batch of new
// token ids as steps end (last true on the final batch). It stops early
// when ctx ends (the sequence is aborted), emit fails, or a drop fault
// fires.
func (s *Server) generate(ctx context.Context, req genRequest, emit func(ids []uint32, last bool) error) (*result, error) {
	st := &stream{
		id:      s.nextID.Add(1),
		arrival: s.clk.Now(),
		notify:  make(chan struct{}, 1),
	}
	st.spec = sim.SeqSpec{ID: st.id, PromptTokens: len(req.prompt), MaxTokens: req.maxTokens, Priority: req.priority}
	gen := sim.NewGenerator(req.seed, req.prompt)
	next := gen.Next
	if !s.cfg.Engine.DisablePrefixCaching {
		var out []uint32
		st.spec.Blocks, st.spec.Tokens, out = seqBlocks(req)
		// The output is generated once, for the blocks; the stream sends it.
		next = func() uint32 { id := out[0]; out = out[1:]; return id }
	}
	if !s.loop.submit(st) {
		return nil, errStopped
	}
	res := &result{arrival: st.arrival, ids: make([]uint32, 0, req.maxTokens)}
	chunks, stalled := 0, false
	for {
		select {
		case <-ctx.Done():
			s.abort(st.id)
			return res, ctx.Err()
		case <-st.notify:
		}
		snap := st.snapshot()
		res.snapshot = snap
		if snap.err != nil {
			return res, snap.err
		}
		if n := snap.output - len(res.ids); n > 0 {
			from := len(res.ids)
			if req.perToken && req.fault.DropAfter > 0 {
				// A batch of several tokens (the handler fell behind the
				// engine) is several chunks: the drop still comes after
				// exactly DropAfter of them, unless the stream ends there.
				n = min(n, req.fault.DropAfter-chunks)
			}
			for range n {
				res.ids = append(res.ids, next())
			}
			last := snap.done && len(res.ids) == snap.output
			if err := emit(res.ids[from:], last); err != nil {
				s.abort(st.id)
				return res, err
			}
			if req.perToken {
				chunks += n
			} else {
				chunks++
			}
			if req.fault.DropAfter > 0 && chunks >= req.fault.DropAfter && !last {
				s.abort(st.id)
				return res, errDropped
			}
			if req.fault.Stall > 0 && !stalled {
				stalled = true
				t := s.clk.NewTimer(req.fault.Stall)
				select {
				case <-ctx.Done():
					t.Stop()
					s.abort(st.id)
					return res, ctx.Err()
				case <-t.C():
				}
				st.wake() // tokens made meanwhile go out in one chunk
			}
		}
		if snap.done {
			return res, nil
		}
	}
}

// seqBlocks names the KV blocks of req's prompt and of the output it will
// generate (synthetic output is a function of seed and prompt), so that a
// request repeating a prompt, or continuing a conversation with the text
// generated so far, hits the blocks earlier requests computed, as in vLLM.
// It returns the token ids (prompt, then output) and that output too
// (req.maxTokens ids).
func seqBlocks(req genRequest) ([]kvblock.Hash, []uint32, []uint32) {
	toks := make([]uint32, len(req.prompt), len(req.prompt)+req.maxTokens)
	copy(toks, req.prompt)
	gen := sim.NewGenerator(req.seed, req.prompt)
	for range req.maxTokens {
		toks = append(toks, gen.Next())
	}
	return kvblock.Chain(make([]kvblock.Hash, 0, len(toks)/sim.BlockSize), 0, toks, sim.BlockSize), toks, toks[len(req.prompt):]
}
