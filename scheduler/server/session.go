package server

import (
	"context"
	"errors"
	"fmt"
	"runtime/trace"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/llmesh/llmesh/api/schedulerv1"
	"github.com/llmesh/llmesh/clock"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/pools"
)

// Session implements the multiplexed service (see the package comment):
// one stream per proxy, many leases on it.
func (s *Server) Session(stream schedulerv1.Scheduler_SessionServer) error {
	return s.ServeSession(stream)
}

// SessionStream is one proxy's session as the service sees it: a gRPC
// Session stream, or a framed connection (scheduler/framed).
type SessionStream interface {
	Context() context.Context
	Recv() (*schedulerv1.SessionRequest, error)
	Send(*schedulerv1.SessionResponse) error
}

// ServeSession serves one proxy's session until its stream ends, then ends
// every lease it still holds.
func (s *Server) ServeSession(stream SessionStream) error {
	if n := s.sessions.Add(1); n > int64(s.limits.MaxSessions) {
		s.sessions.Add(-1)
		s.logf("scheduler: session from %s refused: %d sessions open, the limit is %d\n", peerOf(stream.Context()), n-1, s.limits.MaxSessions)
		return status.Errorf(codes.ResourceExhausted, "scheduler: %d sessions open, the limit is %d", n-1, s.limits.MaxSessions)
	}
	w, release, err := s.identify(stream)
	if err != nil {
		s.sessions.Add(-1)
		return err
	}
	ctx, cancel := context.WithCancel(stream.Context())
	ss := &session{srv: s, ctx: ctx, stream: stream, leases: map[uint64]*held{}, wake: make(chan struct{}, 1), peer: peerOf(stream.Context()),
		who: w, opened: s.clk.Now()}
	ss.wg.Add(1)
	go ss.sendLoop()
	// serve receives until the stream ends. Then the proxy is gone, gave
	// up, broke the protocol or was revoked: every lease of the session
	// ends here, pending admissions leave their queues.
	serve := func() error {
		err := ss.recvLoop()
		ss.endAll()
		cancel()
		ss.wg.Wait()
		release()
		s.sessions.Add(-1)
		return err
	}
	if _, ok := stream.(interface{ Interrupt() }); ok || w == nil {
		// A framed connection's receive is interrupted by revoke.
		if w != nil {
			w.setOnRevoke(ss.revoke)
		}
		return serve()
	}
	// A gRPC receive cannot be interrupted, but it fails once the handler
	// returns: the receiver gets a goroutine of its own, and a revocation
	// returns from the handler at once, which ends the stream with its
	// status. The receiver then ends the session.
	ss.gone = make(chan struct{})
	w.setOnRevoke(ss.revoke)
	served := make(chan error, 1)
	go func() { served <- serve() }()
	select {
	case err := <-served:
		return err
	case <-ss.gone:
		ss.closeSend()
		return ss.revokedErr()
	}
}

// admitNow admits req without waiting when the scheduler decides in the
// step of its arrival (done); otherwise wait finishes the admission, with
// Admit's answers.
type admitNow func(ctx context.Context, req scheduler.Request) (l scheduler.Lease, err error, wait func(context.Context) (scheduler.Lease, error))

// setNow is pools.Set's (and MeshSet's) AdmitNow.
type setNow interface {
	AdmitNow(ctx context.Context, req scheduler.Request) (scheduler.Lease, error, *pools.Pending)
}

var _ setNow = (*pools.Set)(nil)

// nowOf is a's admitNow, or nil for an Admitter that can only wait.
func nowOf(a scheduler.Admitter) admitNow {
	switch a := a.(type) {
	case setNow:
		return func(ctx context.Context, req scheduler.Request) (scheduler.Lease, error, func(context.Context) (scheduler.Lease, error)) {
			l, err, p := a.AdmitNow(ctx, req)
			if p != nil {
				return nil, nil, p.Wait
			}
			return l, err, nil
		}
	case *scheduler.Scheduler:
		return func(ctx context.Context, req scheduler.Request) (scheduler.Lease, error, func(context.Context) (scheduler.Lease, error)) {
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("%w: %w", scheduler.ErrCancelled, err), nil
			}
			p, err := a.Queue(req)
			if err != nil {
				return nil, err, nil
			}
			if l, err, ok := p.Decided(); ok {
				return l, err, nil
			}
			return nil, nil, p.Wait
		}
	}
	return nil
}

// session is one proxy's stream. The handler's goroutine alone receives
// (recvLoop): it admits each Start where the scheduler decides at once,
// queues the answer and, after each received message, sends what it
// queued (flush); it releases the leases the proxy is done with. A Start
// that has to wait for its turn gets a goroutine (wait) until its answer.
// Preemptions are queued by a callback of the lease (run by whichever
// goroutine stepped the scheduler) and sent by sendLoop. Whoever holds
// sendMu sends everything queued meanwhile in the same message (flush).
// mu guards leases, out and every held's fields; sendMu the stream's send
// side and spare.
type session struct {
	srv    *Server
	ctx    context.Context // ends with the stream
	stream SessionStream
	wg     sync.WaitGroup // wait goroutines, sendLoop, preemption watchers
	wake   chan struct{}  // cap 1: a preemption was queued

	mu     sync.Mutex
	leases map[uint64]*held
	out    []*schedulerv1.LeaseResponse

	// requeues is how many requeued Starts the session may still send:
	// one per lease the service preempted. A Start marked requeue beyond
	// them is a new arrival (it waits at the back and counts against the
	// class's max_queue), so requeue cannot be used to jump a full queue.
	requeues int
	peer     string // the client's address, for the log
	// who is the session's identity (nil: identities are off), and opened
	// when the session began: no Start's arrival is earlier.
	who    *who
	opened time.Time

	// revoked is why a reload of the identities closed the session
	// (revoke); recvLoop returns it instead of going on. gone, on a gRPC
	// stream with an identity, is closed by revoke when it is done: the
	// handler then returns (closeSend, then the status), not waiting for
	// the receiver.
	revoked atomic.Pointer[error]
	gone    chan struct{}

	sendMu sync.Mutex
	spare  []*schedulerv1.LeaseResponse // out's other buffer
	resp   schedulerv1.SessionResponse  // the message Send marshals, reused
	broken bool                         // a Send failed: drop the rest
}

// held is one lease of a session, from Start to its end.
type held struct {
	lease    scheduler.Lease // nil until admitted
	ended    chan struct{}   // closed at Done or the session's end; nil unless something waits on it
	ctx      leaseCtx        // a waiting admission's: done when ended closes
	outcome  scheduler.Outcome
	done     bool
	released bool        // Release was called (or is being called)
	preempt  bool        // the Preempt answer was queued
	grace    clock.Timer // ends the lease if the proxy ignores its Preempt
	counted  bool        // counted in its identity's leases (and bytes)
	bytes    int64       // its startBytes, counted in its identity's bytes
	queued   bool        // counted in its identity's queued requests

	// The Admitted answer, in the lease's own allocation: written once,
	// before it is queued, and read by the Send that marshals it.
	admittedResp schedulerv1.LeaseResponse
	admittedMsg  schedulerv1.LeaseResponse_Admitted
	admitted     schedulerv1.Admitted
}

func (ss *session) recvLoop() error {
	// Received into and decoded into the same structures every time (see
	// wire.go).
	var (
		in   wireRequest
		msgs []leaseMsg
		n    = names{}
	)
	// A gRPC stream receives into in (the service's codec leaves the bytes
	// to decodeSessionRequest); a framed connection hands over its frame's
	// bytes; another stream decodes itself.
	grpcStream, _ := ss.stream.(interface{ RecvMsg(any) error })
	rawStream, _ := ss.stream.(interface{ RecvRaw() ([]byte, error) })
	for {
		var decoded []*schedulerv1.LeaseRequest
		in.isRaw = false
		if rawStream != nil {
			b, err := rawStream.RecvRaw()
			if err != nil {
				return ss.revokedErr()
			}
			in.raw, in.isRaw = b, true
		} else if grpcStream != nil {
			if err := grpcStream.RecvMsg(&in); err != nil {
				return ss.revokedErr() // EOF, a cancelled stream or a broken connection
			}
			decoded = in.GetLeases()
		} else {
			m, err := ss.stream.Recv()
			if err != nil {
				return ss.revokedErr()
			}
			decoded = m.GetLeases()
		}
		if err := ss.revokedErr(); err != nil {
			// A message received as the session was revoked is not
			// handled.
			return err
		}
		ss.srv.received.Add(1)
		if in.isRaw {
			var err error
			if msgs, err = decodeSessionRequest(in.raw, msgs, n); err != nil {
				return status.Errorf(codes.InvalidArgument, "scheduler: %v", err)
			}
		} else {
			msgs = msgs[:0]
			for _, r := range decoded {
				msgs = append(msgs, leaseMsgOf(r))
			}
		}
		for i := range msgs {
			if i > 0 && msgs[i].kind != kindStart && msgs[i-1].kind == kindStart {
				// The answers to the Starts leave before the reports
				// that rode with them are applied (a release steps the
				// scheduler): those add nothing to the decision latency.
				ss.flush()
			}
			if err := ss.handle(&msgs[i]); err != nil {
				return err
			}
		}
		// The answers decided while handling the message leave together,
		// now: no goroutine of its own, no wait for a tick.
		ss.flush()
	}
}

func (ss *session) handle(r *leaseMsg) error {
	id := r.lease
	switch r.kind {
	case kindStart:
		if id == 0 {
			return status.Error(codes.InvalidArgument, "scheduler: lease_request.lease must not be 0")
		}
		req, err := ss.srv.request(&r.start)
		if err != nil {
			ss.srv.logf("scheduler: session from %s ended: %v\n", ss.peer, err)
			return err
		}
		h := &held{}
		ss.mu.Lock()
		if err := ss.revokedErr(); err != nil {
			ss.mu.Unlock()
			return err
		}
		if _, dup := ss.leases[id]; dup {
			ss.mu.Unlock()
			ss.srv.logf("scheduler: session from %s ended: lease %d started twice\n", ss.peer, id)
			return status.Errorf(codes.InvalidArgument, "scheduler: lease_request.lease %d is already in use", id)
		}
		if max := ss.srv.limits.MaxLeasesPerSession; len(ss.leases) >= max {
			ss.send(&schedulerv1.LeaseResponse{Lease: id, Msg: &schedulerv1.LeaseResponse_Rejected{Rejected: &schedulerv1.Rejected{
				Reason: schedulerv1.Rejected_REASON_QUEUE_FULL, Message: fmt.Sprintf("scheduler: the session holds %d leases, its limit", max)}}})
			ss.mu.Unlock()
			ss.srv.logf("scheduler: session from %s: lease %d rejected: the session holds %d leases, its limit\n", ss.peer, id, max)
			return nil
		}
		if w := ss.who; w != nil {
			if reason, msg := w.admissible(ss.srv.ids, &req); reason != "" {
				ss.send(&schedulerv1.LeaseResponse{Lease: id, Msg: &schedulerv1.LeaseResponse_Rejected{Rejected: &schedulerv1.Rejected{
					Reason: schedulerv1.Rejected_REASON_REJECTED, Message: "scheduler: " + msg}}})
				ss.mu.Unlock()
				ss.srv.refuse(w.identity().Name, reason, ss.peer, "lease %d: %s", id, msg)
				return nil
			}
			w.st.leases.Add(1)
			h.bytes = startBytes(&req)
			w.st.bytes.Add(h.bytes)
			h.counted = true
		}
		// A request cannot have arrived before its session opened: an
		// age beyond the session's would let a client jump the queue.
		if req.Arrival.Before(ss.opened) {
			req.Arrival = ss.opened
		}
		if req.Requeue {
			if ss.requeues > 0 {
				ss.requeues--
			} else {
				req.Requeue = false
				ss.srv.logf("scheduler: session from %s: lease %d marked requeue without a preempted lease to requeue; queued as a new arrival\n", ss.peer, id)
			}
		}
		ss.leases[id] = h
		ss.mu.Unlock()
		ss.stamp("svc.recv", id)
		ss.start(id, h, req)
	case kindProgress:
		ss.mu.Lock()
		h := ss.leases[id]
		var l scheduler.Lease
		if h != nil {
			l = h.lease
		}
		ss.mu.Unlock()
		if l != nil {
			l.Progress(scheduler.Progress{FirstToken: r.firstToken, Tokens: int(r.tokens)})
		}
	case kindDone:
		o := outcome(r.outcome)
		var l scheduler.Lease
		ss.mu.Lock()
		if h := ss.leases[id]; h != nil {
			delete(ss.leases, id)
			ss.end(h, o)
			if h.lease != nil && !h.released {
				l, h.released = h.lease, true
			}
		}
		ss.mu.Unlock()
		if l != nil {
			l.Release(o)
		}
	}
	// A Done or Progress for a lease the session does not know is one the
	// service already ended (rejected, or the proxy's Done raced our
	// answer): nothing to do.
	return nil
}

// start admits a Start: at once in the receiving goroutine when the
// scheduler decides in the step of its arrival (the usual case with free
// capacity), else in a goroutine that waits for its turn.
func (ss *session) start(id uint64, h *held, req scheduler.Request) {
	if ss.srv.now != nil {
		l, err, wait := ss.srv.now(ss.ctx, req)
		if wait == nil {
			ss.stamp("svc.run", id)
			ss.stamp("svc.decided", id)
			ss.decided(id, h, l, err)
			return
		}
		ss.waitFor(h, wait, id)
		return
	}
	ss.waitFor(h, func(ctx context.Context) (scheduler.Lease, error) { return ss.srv.admitter.Admit(ctx, req) }, id)
}

// waitFor runs admit in a goroutine of its own, with a context that ends
// with the lease (the proxy's Done or the session's end), and answers.
func (ss *session) waitFor(h *held, admit func(context.Context) (scheduler.Lease, error), id uint64) {
	// Only recvLoop ends leases, and it is here: nothing has ended h yet.
	if h.counted {
		ss.mu.Lock()
		h.queued = true
		ss.who.st.queued.Add(1)
		ss.mu.Unlock()
	}
	h.ended = make(chan struct{})
	h.ctx = leaseCtx{Context: ss.ctx, ended: h.ended}
	ss.wg.Add(1)
	go func() {
		defer ss.wg.Done()
		ss.stamp("svc.run", id)
		l, err := admit(&h.ctx)
		ss.stamp("svc.decided", id)
		ss.decided(id, h, l, err)
		ss.flush()
	}()
}

// decided queues the answer to a Start (Admitted or Rejected) and watches
// an admitted lease for its preemption. Called without ss.mu.
func (ss *session) decided(id uint64, h *held, lease scheduler.Lease, err error) {
	ss.mu.Lock()
	ss.unqueue(h)
	if err != nil {
		if !h.done {
			delete(ss.leases, id)
			ss.end(h, scheduler.Cancelled)
			if !errors.Is(err, scheduler.ErrCancelled) {
				ss.send(&schedulerv1.LeaseResponse{Lease: id, Msg: &schedulerv1.LeaseResponse_Rejected{Rejected: rejection(err)}})
			}
		}
		ss.mu.Unlock()
		return
	}
	if h.done { // withdrawn while the scheduler admitted it
		o := h.outcome
		h.released = true
		ss.mu.Unlock()
		lease.Release(o)
		return
	}
	if err := ss.who.revokedErr(); err != nil {
		// Admitted in a slot that a reload freed, for an identity that
		// reload revoked (the session ends next): rejected, the slot
		// passed on.
		delete(ss.leases, id)
		ss.end(h, scheduler.Cancelled)
		h.released = true
		ss.send(&schedulerv1.LeaseResponse{Lease: id, Msg: &schedulerv1.LeaseResponse_Rejected{Rejected: &schedulerv1.Rejected{
			Reason: schedulerv1.Rejected_REASON_REJECTED, Message: status.Convert(err).Message()}}})
		ss.mu.Unlock()
		lease.Release(scheduler.Cancelled)
		return
	}
	h.lease = lease
	h.admitted.QueueNs, h.admitted.Endpoint = int64(lease.QueueTime()), scheduler.EndpointOf(lease)
	h.admittedMsg.Admitted = &h.admitted
	h.admittedResp.Lease, h.admittedResp.Msg = id, &h.admittedMsg
	ss.send(&h.admittedResp)
	ss.mu.Unlock()
	if n, ok := lease.(scheduler.PreemptNotifier); ok {
		n.OnPreempt(func() { ss.preempted(id, h) })
		return
	}
	// A lease that cannot call back: a goroutine watches it.
	ss.mu.Lock()
	if h.done {
		ss.mu.Unlock()
		return
	}
	if h.ended == nil {
		h.ended = make(chan struct{})
	}
	ended := h.ended
	ss.mu.Unlock()
	ss.wg.Add(1)
	go func() {
		defer ss.wg.Done()
		select {
		case <-lease.Preempt():
			ss.preempted(id, h)
		case <-ended:
		}
	}()
}

// preempted queues h's Preempt answer for sendLoop. It runs in whichever
// goroutine stepped the scheduler, under the scheduler's lock: it only
// queues and wakes.
func (ss *session) preempted(id uint64, h *held) {
	ss.mu.Lock()
	queued := !h.done && !h.preempt
	if queued {
		h.preempt = true
		ss.requeues++
		ss.send(&schedulerv1.LeaseResponse{Lease: id, Msg: &schedulerv1.LeaseResponse_Preempt{Preempt: &schedulerv1.Preempt{}}})
		h.grace = ss.srv.clk.AfterFunc(ss.srv.limits.PreemptGrace, func() { ss.ignoredPreempt(id, h) })
	}
	ss.mu.Unlock()
	if queued {
		select {
		case ss.wake <- struct{}{}:
		default:
		}
	}
}

// ignoredPreempt ends h, preempted PreemptGrace ago and still open: the
// proxy did not act on its Preempt, and the slot it holds was promised to
// a more urgent request.
func (ss *session) ignoredPreempt(id uint64, h *held) {
	var l scheduler.Lease
	ss.mu.Lock()
	if !h.done && ss.leases[id] == h {
		delete(ss.leases, id)
		ss.end(h, scheduler.Preempted)
		if h.lease != nil && !h.released {
			l, h.released = h.lease, true
		}
	}
	ss.mu.Unlock()
	if l != nil {
		ss.srv.logf("scheduler: session from %s: lease %d ignored its preemption for %v; ended by the service\n", ss.peer, id, ss.srv.limits.PreemptGrace)
		l.Release(scheduler.Preempted)
	}
}

// revoke closes the session for a reload of the identities (err says
// why): requests still waiting are rejected with err's message, every
// lease ends (the admitted ones are released: their slots are free at
// once), and the client is told err at once: a framed session's receive
// is interrupted and its receiver returns err (the closing frame carries
// it); a gRPC session's handler returns err (gone), which ends the stream
// with that status and fails the pending receive. Called from the
// reloading goroutine.
func (ss *session) revoke(err error) {
	ss.revoked.Store(&err)
	ss.mu.Lock()
	for id, h := range ss.leases {
		if h.lease == nil && !h.done {
			ss.send(&schedulerv1.LeaseResponse{Lease: id, Msg: &schedulerv1.LeaseResponse_Rejected{Rejected: &schedulerv1.Rejected{
				Reason: schedulerv1.Rejected_REASON_REJECTED, Message: status.Convert(err).Message()}}})
		}
	}
	ss.mu.Unlock()
	ss.flush()
	ss.endAll()
	ss.srv.logf("scheduler: session from %s closed: %v\n", ss.peer, status.Convert(err).Message())
	if in, ok := ss.stream.(interface{ Interrupt() }); ok {
		in.Interrupt()
	}
	if ss.gone != nil {
		close(ss.gone)
	}
}

// closeSend sends what is queued (the rejections revoke queued, should
// another goroutine's flush have taken them) and stops the session's
// sending: the handler is about to return, after which nothing may send
// on the stream.
func (ss *session) closeSend() {
	ss.sendMu.Lock()
	defer ss.sendMu.Unlock()
	ss.mu.Lock()
	batch := ss.out
	ss.out = nil
	ss.mu.Unlock()
	if len(batch) > 0 && !ss.broken {
		ss.resp.Leases = batch
		ss.srv.sent.Add(1)
		_ = ss.stream.Send(&ss.resp) // the status follows; a broken stream loses both
		ss.resp.Leases = nil
	}
	ss.broken = true
}

// revokedErr is why the session was revoked, or nil.
func (ss *session) revokedErr() error {
	if p := ss.revoked.Load(); p != nil {
		return *p
	}
	return nil
}

// sendLoop sends what preemptions queue until the session's end.
func (ss *session) sendLoop() {
	defer ss.wg.Done()
	for {
		select {
		case <-ss.wake:
			ss.flush()
		case <-ss.ctx.Done():
			return
		}
	}
}

// end marks h ended with o; ss.mu is held.
func (ss *session) end(h *held, o scheduler.Outcome) {
	if h.done {
		return
	}
	h.done, h.outcome = true, o
	ss.unqueue(h)
	if h.counted {
		h.counted = false
		ss.who.st.leases.Add(-1)
		ss.who.st.bytes.Add(-h.bytes)
	}
	if h.ended != nil {
		close(h.ended)
	}
	if h.grace != nil {
		h.grace.Stop()
	}
}

// unqueue takes h out of its identity's queued requests (it was decided
// or ended); ss.mu is held.
func (ss *session) unqueue(h *held) {
	if h.queued {
		h.queued = false
		ss.who.st.queued.Add(-1)
	}
}

// leaseCtx is a lease's context while its admission is pending: done when
// the lease ends (the proxy's Done, a rejection or the session's end,
// which ends every lease before the session's own context), so a lease
// needs no context of its own. Values and the deadline are the session's.
type leaseCtx struct {
	context.Context
	ended <-chan struct{}
}

func (c *leaseCtx) Done() <-chan struct{} { return c.ended }

func (c *leaseCtx) Err() error {
	select {
	case <-c.ended:
		return context.Canceled
	default:
		return nil
	}
}

// endAll ends every lease of the session (Cancelled) and releases the
// admitted ones; a request still waiting leaves its queue (its goroutine
// sees the lease's end).
func (ss *session) endAll() {
	var release []scheduler.Lease
	ss.mu.Lock()
	for id, h := range ss.leases {
		delete(ss.leases, id)
		ss.end(h, scheduler.Cancelled)
		if h.lease != nil && !h.released {
			h.released = true
			release = append(release, h.lease)
		}
	}
	ss.mu.Unlock()
	for _, l := range release {
		l.Release(scheduler.Cancelled)
	}
}

// send queues m for the next flush; ss.mu is held.
func (ss *session) send(m *schedulerv1.LeaseResponse) { ss.out = append(ss.out, m) }

// flush sends what is queued unless another goroutine is sending: that
// one sends it after its own message, in one message with everything else
// queued meanwhile (so a busy session sends few, large messages without a
// sending goroutine of its own). Called without ss.mu.
func (ss *session) flush() {
	for {
		if !ss.sendMu.TryLock() {
			return // the holder looks at out again after unlocking
		}
		for {
			ss.mu.Lock()
			batch := ss.out
			ss.out = ss.spare[:0]
			ss.mu.Unlock()
			if len(batch) == 0 {
				ss.spare = batch
				break
			}
			if !ss.broken {
				// Send marshals before it returns, so the message and
				// the answers in it are free again after it.
				ss.resp.Leases = batch
				ss.srv.sent.Add(1)
				err := ss.stream.Send(&ss.resp)
				ss.resp.Leases = nil
				if trace.IsEnabled() {
					for _, m := range batch {
						ss.stamp("svc.sent", m.GetLease())
					}
				}
				if err != nil {
					// The stream is broken; recvLoop sees it too and ends
					// the session.
					ss.broken = true
				}
			}
			clear(batch)
			ss.spare = batch
		}
		ss.sendMu.Unlock()
		// A message queued after the last look but before the unlock found
		// the lock taken: send it now.
		ss.mu.Lock()
		pending := len(ss.out) > 0
		ss.mu.Unlock()
		if !pending {
			return
		}
	}
}

// request turns a Start into a scheduler request (shared by Admit and
// Session).
func (s *Server) request(start *startMsg) (scheduler.Request, error) {
	age := time.Duration(start.ageNs)
	if age < 0 {
		return scheduler.Request{}, status.Errorf(codes.InvalidArgument, "scheduler: start.age_ns %d must not be negative", start.ageNs)
	}
	age = min(age, maxAge)
	if start.nBlocks > scheduler.MaxBlocks {
		return scheduler.Request{}, status.Errorf(codes.InvalidArgument, "scheduler: start.blocks: %d blocks, at most %d", start.nBlocks, scheduler.MaxBlocks)
	}
	for i, h := range start.blocks {
		if h == 0 {
			return scheduler.Request{}, status.Errorf(codes.InvalidArgument, "scheduler: start.blocks[%d]: 0 is not a block hash", i)
		}
	}
	return scheduler.Request{
		ID:           start.id,
		Pool:         start.pool,
		Class:        start.class,
		PromptTokens: int(start.promptTokens),
		MaxTokens:    int(start.maxTokens),
		Arrival:      s.clk.Now().Add(-age),
		Requeue:      start.requeue,
		Affinity:     start.affinity,
		Blocks:       start.blocks,
	}, nil
}

// peerOf is the client's address in ctx, or "an unknown peer".
func peerOf(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return "an unknown peer"
}

// stamp marks a lease's step in a Go execution trace, when one is running
// (scheduler serve --trace): what the decision latency's parts are made
// of. Without a trace it costs an atomic load.
func (ss *session) stamp(step string, id uint64) {
	if trace.IsEnabled() {
		trace.Log(ss.ctx, step, fmt.Sprintf("%p/%d", ss, id))
	}
}
