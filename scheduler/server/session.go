package server

import (
	"context"
	"errors"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/llmesh/llmesh/api/schedulerv1"
	"github.com/llmesh/llmesh/scheduler"
)

// Session implements the multiplexed service (see the package comment):
// one stream per proxy, many leases on it.
func (s *Server) Session(stream schedulerv1.Scheduler_SessionServer) error {
	ctx, cancel := context.WithCancel(stream.Context())
	ss := &session{srv: s, ctx: ctx, stream: stream, leases: map[uint64]*held{}}
	s.sessions.Add(1)
	defer s.sessions.Add(-1)
	err := ss.recvLoop()
	// The proxy is gone, gave up or broke the protocol: every lease of the
	// session ends here, pending admissions leave their queues. Only the
	// admit goroutines send, so none does once they have ended.
	ss.endAll()
	cancel()
	ss.wg.Wait()
	return err
}

// session is one proxy's stream. The handler's goroutine alone receives
// (recvLoop) and releases the leases the proxy is done with; each Start
// gets a goroutine (admit) that waits for the admission, then for a
// preemption or the lease's end. An answer is queued in out and sent by
// whichever admit goroutine holds sendMu, which sends everything queued
// meanwhile in the same message (flush). mu guards leases, out and every
// held's fields; sendMu the stream's send side and spare.
type session struct {
	srv    *Server
	ctx    context.Context // ends with the stream
	stream schedulerv1.Scheduler_SessionServer
	wg     sync.WaitGroup // admit goroutines

	mu     sync.Mutex
	leases map[uint64]*held
	out    []*schedulerv1.LeaseResponse

	sendMu sync.Mutex
	spare  []*schedulerv1.LeaseResponse // out's other buffer
	resp   schedulerv1.SessionResponse  // the message Send marshals, reused
	broken bool                         // a Send failed: drop the rest
}

// held is one lease of a session, from Start to its end.
type held struct {
	lease    scheduler.Lease // nil until admitted
	ended    chan struct{}   // closed at Done or the session's end
	ctx      leaseCtx        // the pending admission's: done when ended closes
	outcome  scheduler.Outcome
	done     bool
	released bool // Release was called (by recvLoop or admit)

	// The Admitted answer, in the lease's own allocation: written once,
	// before it is queued, and read by the Send that marshals it.
	admittedResp schedulerv1.LeaseResponse
	admittedMsg  schedulerv1.LeaseResponse_Admitted
	admitted     schedulerv1.Admitted
}

func (ss *session) recvLoop() error {
	for {
		m, err := ss.stream.Recv()
		if err != nil {
			return nil // EOF, a cancelled stream or a broken connection
		}
		for _, r := range m.GetLeases() {
			if err := ss.handle(r); err != nil {
				return err
			}
		}
	}
}

func (ss *session) handle(r *schedulerv1.LeaseRequest) error {
	id := r.GetLease()
	switch msg := r.GetMsg().(type) {
	case *schedulerv1.LeaseRequest_Start:
		if id == 0 {
			return status.Error(codes.InvalidArgument, "scheduler: lease_request.lease must not be 0")
		}
		req, err := ss.srv.request(msg.Start)
		if err != nil {
			return err
		}
		h := &held{ended: make(chan struct{})}
		h.ctx = leaseCtx{Context: ss.ctx, ended: h.ended}
		ss.mu.Lock()
		if _, dup := ss.leases[id]; dup {
			ss.mu.Unlock()
			return status.Errorf(codes.InvalidArgument, "scheduler: lease_request.lease %d is already in use", id)
		}
		ss.leases[id] = h
		ss.mu.Unlock()
		ss.wg.Add(1)
		go ss.admit(&h.ctx, id, h, req)
	case *schedulerv1.LeaseRequest_Progress:
		ss.mu.Lock()
		h := ss.leases[id]
		var l scheduler.Lease
		if h != nil {
			l = h.lease
		}
		ss.mu.Unlock()
		if l != nil {
			l.Progress(scheduler.Progress{FirstToken: msg.Progress.GetFirstToken(), Tokens: int(msg.Progress.GetTokens())})
		}
	case *schedulerv1.LeaseRequest_Done:
		o := outcome(msg.Done.GetOutcome())
		var l scheduler.Lease
		ss.mu.Lock()
		if h := ss.leases[id]; h != nil {
			delete(ss.leases, id)
			ss.end(h, o)
			if h.lease != nil {
				// Released here rather than by its admit goroutine: the
				// capacity is free before that goroutine has woken.
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

// end marks h ended with o; ss.mu is held.
func (ss *session) end(h *held, o scheduler.Outcome) {
	if h.done {
		return
	}
	h.done, h.outcome = true, o
	close(h.ended)
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

func (ss *session) endAll() {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for id, h := range ss.leases {
		delete(ss.leases, id)
		ss.end(h, scheduler.Cancelled)
	}
}

// admit waits for one admission and owns its lease until it ends.
func (ss *session) admit(ctx context.Context, id uint64, h *held, req scheduler.Request) {
	defer ss.wg.Done()
	lease, err := ss.srv.admitter.Admit(ctx, req)
	ss.mu.Lock()
	if err != nil {
		if !h.done {
			delete(ss.leases, id)
			ss.end(h, scheduler.Cancelled)
			if !errors.Is(err, scheduler.ErrCancelled) {
				ss.send(&schedulerv1.LeaseResponse{Lease: id, Msg: &schedulerv1.LeaseResponse_Rejected{Rejected: rejection(err)}})
			}
		}
		ss.mu.Unlock()
		ss.flush()
		return
	}
	if h.done { // withdrawn while the scheduler admitted it
		o := h.outcome
		ss.mu.Unlock()
		lease.Release(o)
		return
	}
	h.lease = lease
	h.admitted.QueueNs, h.admitted.Endpoint = int64(lease.QueueTime()), scheduler.EndpointOf(lease)
	h.admittedMsg.Admitted = &h.admitted
	h.admittedResp.Lease, h.admittedResp.Msg = id, &h.admittedMsg
	ss.send(&h.admittedResp)
	ss.mu.Unlock()
	ss.flush()
	select {
	case <-lease.Preempt():
		ss.mu.Lock()
		if !h.done {
			ss.send(&schedulerv1.LeaseResponse{Lease: id, Msg: &schedulerv1.LeaseResponse_Preempt{Preempt: &schedulerv1.Preempt{}}})
		}
		ss.mu.Unlock()
		ss.flush()
		<-h.ended
	case <-h.ended:
	}
	ss.mu.Lock()
	release := !h.released
	h.released = true
	ss.mu.Unlock()
	if release { // the session ended: recvLoop released nothing
		lease.Release(h.outcome)
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
				err := ss.stream.Send(&ss.resp)
				ss.resp.Leases = nil
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
func (s *Server) request(start *schedulerv1.Start) (scheduler.Request, error) {
	age := time.Duration(start.GetAgeNs())
	if age < 0 {
		return scheduler.Request{}, status.Errorf(codes.InvalidArgument, "scheduler: start.age_ns %d must not be negative", start.GetAgeNs())
	}
	age = min(age, maxAge)
	return scheduler.Request{
		ID:           start.GetId(),
		Pool:         start.GetPool(),
		Class:        start.GetClass(),
		PromptTokens: int(start.GetPromptTokens()),
		MaxTokens:    int(start.GetMaxTokens()),
		Arrival:      s.clk.Now().Add(-age),
		Requeue:      start.GetRequeue(),
		Affinity:     start.GetAffinity(),
	}, nil
}
