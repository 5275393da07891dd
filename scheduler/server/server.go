package server

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/llmesh/llmesh/api/schedulerv1"
	"github.com/llmesh/llmesh/clock"
	"github.com/llmesh/llmesh/scheduler"
)

// Server is the gRPC service.
type Server struct {
	schedulerv1.UnimplementedSchedulerServer
	admitter scheduler.Admitter
	now      admitNow // admitter's, when it can answer without waiting; nil: Session waits in a goroutine per Start
	clk      clock.Clock
	sessions atomic.Int64 // open Session streams
	// Session messages received and sent (each carries one or more
	// leases' messages).
	received, sent atomic.Uint64
	limits         Limits
	logf           func(format string, args ...any)
	ids            *identities // nil: every client is trusted (SetIdentities)
}

// Limits bound what one client can hold of the service, so that a proxy
// that misbehaves (or anyone who can connect) cannot take the service's
// memory or a pool's slots for good. Zero fields take the defaults.
type Limits struct {
	// MaxSessions caps the open Session streams; one more is refused with
	// RESOURCE_EXHAUSTED. Default DefaultMaxSessions.
	MaxSessions int
	// MaxLeasesPerSession caps the leases one session holds at once,
	// waiting or admitted; a Start beyond it is rejected (the session
	// stays). Default DefaultMaxLeasesPerSession.
	MaxLeasesPerSession int
	// PreemptGrace is how long a preempted lease may stay open after its
	// Preempt was sent: a proxy that has not ended it by then has its lease
	// ended by the service (outcome preempted), which frees the slot the
	// preemption was for. Default DefaultPreemptGrace.
	PreemptGrace time.Duration
}

// Defaults of Limits.
const (
	DefaultMaxSessions         = 1024
	DefaultMaxLeasesPerSession = 16384
	DefaultPreemptGrace        = 10 * time.Second
)

func (l Limits) withDefaults() Limits {
	if l.MaxSessions <= 0 {
		l.MaxSessions = DefaultMaxSessions
	}
	if l.MaxLeasesPerSession <= 0 {
		l.MaxLeasesPerSession = DefaultMaxLeasesPerSession
	}
	if l.PreemptGrace <= 0 {
		l.PreemptGrace = DefaultPreemptGrace
	}
	return l
}

// SetLimits sets the service's limits; call it before serving.
func (s *Server) SetLimits(l Limits) { s.limits = l.withDefaults() }

// SetLog sets where protocol violations and limit refusals are reported
// (one line each, naming the peer's session); nil discards them. Call it
// before serving.
func (s *Server) SetLog(logf func(format string, args ...any)) {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	s.logf = logf
}

var _ schedulerv1.SchedulerServer = (*Server)(nil)

// New serves a; clk (nil: the real clock) turns the client's age_ns into
// an arrival time.
func New(a scheduler.Admitter, clk clock.Clock) *Server {
	if clk == nil {
		clk = clock.Real{}
	}
	return &Server{admitter: a, now: nowOf(a), clk: clk, limits: Limits{}.withDefaults(), logf: func(string, ...any) {}}
}

// WindowSize is the HTTP/2 flow-control window of the service's streams
// and connections (see GRPCOptions).
const WindowSize = 1 << 20

// GRPCOptions are the gRPC server options the service runs with (Run uses
// them): a codec that leaves a Session's requests to the service's own
// decoder, and static flow-control windows, since gRPC's default dynamic window
// probes the bandwidth with a ping and a window update every round trip
// while data flows, extra frames, system calls and wake-ups for every few
// of a session's small messages (scheduler/client sets the same on its
// side).
func GRPCOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.InitialWindowSize(WindowSize), grpc.InitialConnWindowSize(WindowSize),
		// Session requests decoded by hand into reused structures
		// (wire.go); every other message as gRPC does.
		grpc.ForceServerCodecV2(newCodec())}
}

// Register adds the service to g.
func (s *Server) Register(g *grpc.Server) { schedulerv1.RegisterSchedulerServer(g, s) }

// maxAge bounds a client-reported age; anything older is clamped (it has
// passed every max wait anyway).
const maxAge = 24 * time.Hour

// Sessions is the number of open Session streams (one per connected proxy
// that uses them).
func (s *Server) Sessions() int { return int(s.sessions.Load()) }

// Messages is how many Session messages the service has received and
// sent; each carries the messages of one or more leases.
func (s *Server) Messages() (received, sent uint64) { return s.received.Load(), s.sent.Load() }

// Admit implements the one-stream-per-admission service (see the package
// comment); proxies of this version use Session.
func (s *Server) Admit(stream schedulerv1.Scheduler_AdmitServer) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	start := first.GetStart()
	if start == nil {
		return status.Error(codes.InvalidArgument, "scheduler: the first message must be start")
	}
	sm := startOf(start)
	req, err := s.request(&sm)
	if err != nil {
		return err
	}
	w, done, err := s.identify(stream)
	if err != nil {
		return err
	}
	defer done()
	ctx := stream.Context()
	var revoked <-chan struct{} // closed when a reload of the identities revokes w (nil: never)
	if w != nil {
		if reason, msg := w.admissible(s.ids, &req); reason != "" {
			s.refuse(w.identity().Name, reason, peerOf(stream.Context()), "%s", msg)
			return stream.Send(&schedulerv1.AdmitResponse{Msg: &schedulerv1.AdmitResponse_Rejected{Rejected: &schedulerv1.Rejected{
				Reason: schedulerv1.Rejected_REASON_REJECTED, Message: "scheduler: " + msg}}})
		}
		n := startBytes(&req)
		w.st.leases.Add(1)
		w.st.bytes.Add(n)
		defer func() {
			w.st.leases.Add(-1)
			w.st.bytes.Add(-n)
		}()
		// A revocation ends the wait, or the admission: the handler
		// returns its status, which ends the stream.
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		gone := make(chan struct{})
		w.setOnRevoke(func(err error) {
			s.logf("scheduler: admission stream from %s closed: %v\n", peerOf(stream.Context()), status.Convert(err).Message())
			close(gone)
			cancel()
		})
		revoked = gone
	}
	lease, err := s.admitter.Admit(ctx, req)
	if err != nil {
		if errors.Is(err, scheduler.ErrCancelled) {
			if err := w.revokedErr(); err != nil {
				return err
			}
			return status.FromContextError(stream.Context().Err()).Err()
		}
		return stream.Send(&schedulerv1.AdmitResponse{Msg: &schedulerv1.AdmitResponse_Rejected{Rejected: rejection(err)}})
	}
	if err := w.revokedErr(); err != nil {
		// Admitted in a slot a reload freed, for an identity it revoked.
		lease.Release(scheduler.Cancelled)
		return err
	}
	if err := stream.Send(&schedulerv1.AdmitResponse{Msg: &schedulerv1.AdmitResponse_Admitted{
		Admitted: &schedulerv1.Admitted{QueueNs: int64(lease.QueueTime()), Endpoint: scheduler.EndpointOf(lease)},
	}}); err != nil {
		lease.Release(scheduler.Cancelled)
		return err
	}
	ended := make(chan scheduler.Outcome, 1)
	go receive(stream, lease, ended)
	preempt := lease.Preempt()
	for {
		select {
		case <-preempt:
			preempt = nil
			if err := stream.Send(&schedulerv1.AdmitResponse{Msg: &schedulerv1.AdmitResponse_Preempt{Preempt: &schedulerv1.Preempt{}}}); err != nil {
				// The stream is broken; receive will notice and end.
				continue
			}
		case o := <-ended:
			lease.Release(o)
			return nil
		case <-revoked:
			// receive ends with the stream, once the handler returns.
			lease.Release(scheduler.Cancelled)
			return w.revokedErr()
		}
	}
}

// receive forwards progress until Done or the stream's end and reports the
// outcome once; a broken stream counts as Cancelled.
func receive(stream schedulerv1.Scheduler_AdmitServer, lease scheduler.Lease, ended chan<- scheduler.Outcome) {
	for {
		m, err := stream.Recv()
		if err != nil {
			// EOF without Done, a cancelled stream or a broken connection:
			// the proxy is gone or gave up, so the admission ends here.
			ended <- scheduler.Cancelled
			return
		}
		switch msg := m.GetMsg().(type) {
		case *schedulerv1.AdmitRequest_Progress:
			lease.Progress(scheduler.Progress{FirstToken: msg.Progress.GetFirstToken(), Tokens: int(msg.Progress.GetTokens())})
		case *schedulerv1.AdmitRequest_Done:
			ended <- outcome(msg.Done.GetOutcome())
			return
		}
	}
}

func outcome(o schedulerv1.Outcome) scheduler.Outcome {
	switch o {
	case schedulerv1.Outcome_OUTCOME_FAILED:
		return scheduler.Failed
	case schedulerv1.Outcome_OUTCOME_CANCELLED:
		return scheduler.Cancelled
	case schedulerv1.Outcome_OUTCOME_PREEMPTED:
		return scheduler.Preempted
	case schedulerv1.Outcome_OUTCOME_UNREACHABLE:
		return scheduler.Unreachable
	}
	return scheduler.Done
}

func rejection(err error) *schedulerv1.Rejected {
	r := &schedulerv1.Rejected{Reason: schedulerv1.Rejected_REASON_REJECTED, Message: err.Error()}
	switch {
	case errors.Is(err, scheduler.ErrQueueFull):
		r.Reason = schedulerv1.Rejected_REASON_QUEUE_FULL
	case errors.Is(err, scheduler.ErrClosed):
		r.Reason = schedulerv1.Rejected_REASON_CLOSED
	}
	return r
}
