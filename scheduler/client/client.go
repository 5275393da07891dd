package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/llmesh/llmesh/api/schedulerv1"
	"github.com/llmesh/llmesh/clock"
	"github.com/llmesh/llmesh/kvblock"
	"github.com/llmesh/llmesh/scheduler"
)

// Options configure a Client.
type Options struct {
	// FailOpen admits requests without coordination when the service cannot
	// be reached (mesh scheduler_service.failure_mode "fail_open"); false
	// fails closed with scheduler.ErrUnavailable.
	FailOpen bool
	// Fallback, with FailOpen, admits requests while the service is
	// unreachable (for example an in-process scheduler.Scheduler with this
	// host's share of the capacity). Nil admits at once with a lease that is
	// never preempted.
	Fallback scheduler.Admitter
	// Clock measures request age and when to try Session again after a
	// fallback; nil means the real clock.
	Clock clock.Clock
	// Timeout bounds each attempt to connect to the service (mesh
	// scheduler_service.timeout); while no connection is up, admissions
	// fail over per FailOpen. 0 means 1s.
	Timeout time.Duration
	// DialOptions are added to the gRPC client's.
	DialOptions []grpc.DialOption
	// TLS, when set, secures both transports with it (for mTLS it holds
	// the client's certificate; tlsfiles.Client builds it); nil dials in
	// plaintext.
	TLS *tls.Config
	// Token, when not empty, is the bearer token the client proves its
	// identity with to a service that has an identities file (mesh
	// scheduler_service.token_file): gRPC metadata "authorization: Bearer
	// <token>", or the framed preface's authorization header. Without
	// TLS it travels in the clear.
	Token string
	// StreamPerAdmission uses one Admit stream per admission, the protocol
	// of services older than Session; false multiplexes every admission
	// over one Session stream (and falls back to Admit streams by itself
	// when the service does not implement Session, trying Session again
	// every sessionRetry, so a service upgraded in place is used fully).
	StreamPerAdmission bool
	// Transport carries the Session: TransportFramed, the messages over a
	// plain TCP connection (scheduler/framed), which costs the service far
	// less per message; TransportGRPC, a gRPC stream; or TransportAuto
	// (the default, "" too): framed, and gRPC while the service does not
	// speak it (an older service, an HTTP/2 proxy in between), trying
	// framed again every sessionRetry. The service accepts both on one
	// address.
	Transport string
	// ReportDelay is how long a Session lease's Progress and Release may
	// wait to travel with the session's next message (mesh
	// scheduler_service.report_delay): the next Admit's Start takes every
	// report queued by then, and the sender sends what is left once the
	// delay has passed, so a busy proxy sends about one message per
	// admission instead of two or three. Starts never wait. The service
	// sees a release up to the delay late (the Go runtime's timers may
	// fire up to about a millisecond late on an idle proxy). 0 means
	// DefaultReportDelay; negative sends each report at once.
	ReportDelay time.Duration
}

// WindowSize is the HTTP/2 flow-control window of a client's stream and
// connection (static: set, it turns off gRPC's bandwidth probing). A
// session's messages are small; 1 MiB is hundreds of milliseconds of them
// at any rate the service sustains.
const WindowSize = 1 << 20

// DefaultReportDelay is Options.ReportDelay's default.
const DefaultReportDelay = 150 * time.Microsecond

// ReportDelayOf is Options.ReportDelay for a configured delay where 0
// means none (mesh scheduler_service.report_delay, scheduler bench
// --report-delay).
func ReportDelayOf(d time.Duration) time.Duration {
	if d <= 0 {
		return -1
	}
	return d
}

// The transports of Options.Transport.
const (
	TransportAuto   = "auto"
	TransportGRPC   = "grpc"
	TransportFramed = "framed"
)

// Client is a scheduler.Admitter backed by the shared service.
type Client struct {
	target string
	conn   *grpc.ClientConn // nil with TransportFramed
	api    schedulerv1.SchedulerClient
	opts   Options

	mu     sync.Mutex
	closed bool
	live   map[*lease]struct{} // leases of Admit streams
	sess   *session            // the live session; nil: none yet or it ended
	wg     sync.WaitGroup

	openMu sync.Mutex // one caller opens a session at a time
	// Guarded by openMu (framed transport): after a failed dial, until
	// dialRetry, opening fails at once with dialErr; with TransportAuto,
	// sessions are gRPC streams until framedRetry.
	dialRetry   time.Time
	dialErr     error
	dialBackoff time.Duration
	framedRetry time.Time
	// legacyUntil (UnixNano on opts.Clock): until then the service is
	// taken to lack Session and admissions use Admit streams.
	legacyUntil atomic.Int64
}

var _ scheduler.Admitter = (*Client)(nil)

// New returns a client for the service at target (host:port). It connects
// lazily, so an unreachable service is noticed per request.
func New(target string, opts Options) (*Client, error) {
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if opts.Timeout <= 0 {
		opts.Timeout = time.Second
	}
	if opts.ReportDelay == 0 {
		opts.ReportDelay = DefaultReportDelay
	}
	switch opts.Transport {
	case "":
		opts.Transport = TransportAuto
	case TransportAuto, TransportGRPC:
	case TransportFramed:
		if opts.StreamPerAdmission {
			return nil, fmt.Errorf("scheduler client: transport %q carries sessions only, not a stream per admission", TransportFramed)
		}
		return &Client{target: target, opts: opts, live: map[*lease]struct{}{}}, nil
	default:
		return nil, fmt.Errorf("scheduler client: transport %q is not %q, %q or %q", opts.Transport, TransportAuto, TransportGRPC, TransportFramed)
	}
	// Reconnect quickly after a service restart: backoff from 100ms to 1s.
	creds := insecure.NewCredentials()
	if opts.TLS != nil {
		creds = credentials.NewTLS(opts.TLS)
	}
	dial := append([]grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: opts.Timeout,
		}),
		// Static flow-control windows: gRPC's default dynamic window
		// probes the bandwidth with a ping (and a window update) every
		// round trip while data flows, extra frames, system calls and
		// wake-ups on both hosts for every few small messages. The
		// service sets the same (scheduler/server.GRPCOptions).
		grpc.WithInitialWindowSize(WindowSize),
		grpc.WithInitialConnWindowSize(WindowSize),
	}, opts.DialOptions...)
	if opts.Token != "" {
		dial = append(dial, grpc.WithPerRPCCredentials(bearer(opts.Token)))
	}
	conn, err := grpc.NewClient(target, dial...)
	if err != nil {
		return nil, fmt.Errorf("scheduler client: %w", err)
	}
	return &Client{target: target, conn: conn, api: schedulerv1.NewSchedulerClient(conn), opts: opts, live: map[*lease]struct{}{}}, nil
}

// Admit asks the service for an admission (see scheduler.Admitter).
func (c *Client) Admit(ctx context.Context, req scheduler.Request) (scheduler.Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", scheduler.ErrCancelled, err)
	}
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return nil, scheduler.ErrClosed
	}
	if !c.opts.StreamPerAdmission && c.opts.Clock.Now().UnixNano() >= c.legacyUntil.Load() {
		l, err := c.admitSession(ctx, req)
		if !errors.Is(err, errNoSession) {
			return l, err
		}
		// An older service: Admit streams until the next try.
		c.legacyUntil.Store(c.opts.Clock.Now().Add(sessionRetry).UnixNano())
	}
	return c.admitStream(ctx, req)
}

// start is req's Start message.
func (c *Client) start(req scheduler.Request) *schedulerv1.Start {
	now := c.opts.Clock.Now()
	age := time.Duration(0)
	if !req.Arrival.IsZero() && req.Arrival.Before(now) {
		age = now.Sub(req.Arrival)
	}
	return &schedulerv1.Start{
		Id:           req.ID,
		Pool:         req.Pool,
		Class:        req.Class,
		PromptTokens: clampU32(req.PromptTokens),
		MaxTokens:    clampU32(req.MaxTokens),
		AgeNs:        int64(age),
		Requeue:      req.Requeue,
		Affinity:     req.Affinity,
		Blocks:       wireBlocks(req.Blocks),
	}
}

// wireBlocks is the leading scheduler.MaxBlocks of a request's blocks, as
// Start carries them (the picker looks at no more, the service takes no
// more).
func wireBlocks(bs []kvblock.Hash) []uint64 {
	if len(bs) == 0 {
		return nil
	}
	bs = bs[:min(len(bs), scheduler.MaxBlocks)]
	out := make([]uint64, len(bs))
	for i, h := range bs {
		out[i] = uint64(h)
	}
	return out
}

// sessionRetry is how long a client that found no Session method uses
// Admit streams before it tries Session again.
const sessionRetry = time.Minute

// errNoSession: the service does not implement Session.
var errNoSession = errors.New("the scheduler service has no Session method")

// admitSession admits req as a lease of the session. A session that could
// not open or broke before the answer leaves req to the failure mode.
func (c *Client) admitSession(ctx context.Context, req scheduler.Request) (scheduler.Lease, error) {
	s, err := c.openSession(ctx)
	if err != nil {
		if errors.Is(err, scheduler.ErrClosed) || errors.Is(err, scheduler.ErrCancelled) {
			return nil, err
		}
		return c.unavailable(ctx, req, err)
	}
	l, resp, err := s.admit(ctx, c.start(req))
	switch {
	case errors.Is(err, scheduler.ErrCancelled):
		return nil, err
	case status.Code(err) == codes.Unimplemented:
		return nil, errNoSession
	case err != nil:
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w: %w", scheduler.ErrCancelled, ctx.Err())
		}
		return c.unavailable(ctx, req, err)
	}
	switch msg := resp.GetMsg().(type) {
	case *schedulerv1.LeaseResponse_Admitted:
		l.queue, l.endpoint = time.Duration(msg.Admitted.GetQueueNs()), msg.Admitted.GetEndpoint()
		return l, nil
	case *schedulerv1.LeaseResponse_Rejected:
		return nil, rejected(msg.Rejected)
	}
	return nil, fmt.Errorf("%w: unexpected answer %T from the scheduler service", scheduler.ErrRejected, resp.GetMsg())
}

// admitStream admits req over an Admit stream of its own.
func (c *Client) admitStream(ctx context.Context, req scheduler.Request) (scheduler.Lease, error) {
	// The stream outlives ctx (which bounds only the wait), so it gets its
	// own cancel; ctx's end cancels it only until admission.
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancel)
	stream, err := c.api.Admit(sctx)
	if err == nil {
		err = stream.Send(&schedulerv1.AdmitRequest{Msg: &schedulerv1.AdmitRequest_Start{Start: c.start(req)}})
	}
	var resp *schedulerv1.AdmitResponse
	if err == nil {
		resp, err = stream.Recv()
	}
	if !stop() || ctx.Err() != nil {
		cancel()
		return nil, fmt.Errorf("%w: %w", scheduler.ErrCancelled, ctx.Err())
	}
	if err != nil {
		cancel()
		return c.unavailable(ctx, req, err)
	}
	switch msg := resp.GetMsg().(type) {
	case *schedulerv1.AdmitResponse_Admitted:
		if l, ok := c.newLease(stream, cancel, time.Duration(msg.Admitted.GetQueueNs()), msg.Admitted.GetEndpoint()); ok {
			return l, nil
		}
		return nil, scheduler.ErrClosed
	case *schedulerv1.AdmitResponse_Rejected:
		cancel()
		return nil, rejected(msg.Rejected)
	}
	cancel()
	return nil, fmt.Errorf("%w: unexpected first message %T from the scheduler service", scheduler.ErrRejected, resp.GetMsg())
}

func rejected(r *schedulerv1.Rejected) error {
	class := scheduler.ErrRejected
	switch r.GetReason() {
	case schedulerv1.Rejected_REASON_QUEUE_FULL:
		class = scheduler.ErrQueueFull
	case schedulerv1.Rejected_REASON_CLOSED:
		class = scheduler.ErrClosed
	}
	return fmt.Errorf("%w (scheduler service): %s", class, r.GetMessage())
}

// unavailable applies the failure mode to a request the service could not
// decide.
func (c *Client) unavailable(ctx context.Context, req scheduler.Request, cause error) (scheduler.Lease, error) {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return nil, scheduler.ErrClosed
	}
	if code := status.Code(cause); code != codes.Unavailable && code != codes.Canceled && code != codes.DeadlineExceeded &&
		code != codes.Unknown && code != codes.Internal {
		return nil, fmt.Errorf("%w: scheduler service: %w", scheduler.ErrRejected, cause)
	}
	if !c.opts.FailOpen {
		return nil, fmt.Errorf("%w: %w", scheduler.ErrUnavailable, cause)
	}
	if c.opts.Fallback != nil {
		return c.opts.Fallback.Admit(ctx, req)
	}
	return openLease{}, nil
}

func clampU32(n int) uint32 {
	switch {
	case n < 0:
		return 0
	case n > 1<<32-1:
		return 1<<32 - 1
	}
	return uint32(n)
}

// Close cuts the session and every admission stream (the service releases them) and waits
// for the leases' goroutines. Leases stay usable; Release is then a no-op.
func (c *Client) Close() error {
	c.mu.Lock()
	c.closed = true
	for l := range c.live {
		l.cancel()
	}
	s := c.sess
	c.mu.Unlock()
	if s != nil {
		// Reports still waiting for the report delay go first, so the
		// service counts their outcomes (the stream's end would release
		// them as cancelled).
		s.flush()
		s.cancel() // its receiver ends the session
	}
	var err error
	if c.conn != nil {
		err = c.conn.Close()
	}
	c.wg.Wait()
	return err
}

func (c *Client) untrack(l *lease) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.live, l)
}

// openLease is a fail-open admission: nothing to release, never preempted.
type openLease struct{}

var _ scheduler.Lease = openLease{}

var neverClosed = make(chan struct{})

func (openLease) Preempt() <-chan struct{}    { return neverClosed }
func (openLease) Progress(scheduler.Progress) {}
func (openLease) Release(scheduler.Outcome)   {}
func (openLease) QueueTime() time.Duration    { return 0 }

// bearer sends a token as every call's authorization metadata.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

// RequireTransportSecurity is false: the operator chose the transport
// (scheduler_service.tls), and the service on loopback may be plaintext.
func (bearer) RequireTransportSecurity() bool { return false }
