package client

import (
	"context"
	"errors"
	"fmt"
	"runtime/trace"
	"sync"
	"time"

	"github.com/llmesh/llmesh/api/schedulerv1"
	"github.com/llmesh/llmesh/clock"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/framed"
)

// errSessionEnded reports a session that ended while a request waited for
// its answer (the stream's own error is the cause when there is one).
var errSessionEnded = errors.New("scheduler session ended")

// SessionTransport is the transport of the client's live session,
// TransportFramed or TransportGRPC (what TransportAuto chose), or "" while
// none is open.
func (c *Client) SessionTransport() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sess == nil {
		return ""
	}
	if _, ok := c.sess.stream.(*framed.ClientConn); ok {
		return TransportFramed
	}
	return TransportGRPC
}

// sessionStream is the client's side of a Session: a gRPC stream or a
// framed connection.
type sessionStream interface {
	Send(*schedulerv1.SessionRequest) error
	Recv() (*schedulerv1.SessionResponse, error)
}

// session is one Session stream of the client: every admission of this
// proxy is a lease on it, named by an id the client counts up.
type session struct {
	c      *Client
	stream sessionStream
	cancel func()
	ended  chan struct{} // closed when the session is over
	err    error         // why it ended; set before ended is closed

	// Guarded by c.mu (the client's one lock: sessions are short critical
	// sections per message, and one lock keeps release ordering simple).
	next   uint64
	leases map[uint64]*sLease // pending or admitted, not yet released
	queue  []*sLease          // leases with something to send
	dead   bool
	wake   chan struct{} // cap 1: Progress or Release queued something

	sendMu sync.Mutex
	spare  []*sLease                   // queue's other buffer
	msgs   []*schedulerv1.LeaseRequest // the batch's messages, reused
	req    schedulerv1.SessionRequest  // the message Send marshals, reused
	broken bool                        // a Send failed: drop the rest
}

// sLease is an admission held through a session.
type sLease struct {
	s        *session
	id       uint64
	answer   chan answer // cap 1: the service's Admitted or Rejected
	preempt  chan struct{}
	queue    time.Duration
	endpoint string

	// Guarded by c.mu.
	start     *schedulerv1.Start // to send; nil once sent
	progress  scheduler.Progress
	sent      scheduler.Progress
	released  bool
	outcome   scheduler.Outcome
	queued    bool
	preempted bool

	// The lease's messages, in its own allocation; guarded by s.sendMu
	// (built by messages, read by the Send that marshals them).
	startReq, progressReq, doneReq schedulerv1.LeaseRequest
	startMsg                       schedulerv1.LeaseRequest_Start
	progressMsg                    schedulerv1.LeaseRequest_Progress
	doneMsg                        schedulerv1.LeaseRequest_Done
	progressBody                   schedulerv1.Progress
	doneBody                       schedulerv1.Done
}

type answer struct {
	msg *schedulerv1.LeaseResponse
	err error
}

var (
	_ scheduler.Lease  = (*sLease)(nil)
	_ scheduler.Routed = (*sLease)(nil)
)

// openSession returns the live session, opening one when there is none.
// One caller opens at a time (c.openMu); the others wait for it. ctx, the
// opener's request, bounds only the opening: the session outlives it.
func (c *Client) openSession(ctx context.Context) (*session, error) {
	c.mu.Lock()
	s := c.sess
	c.mu.Unlock()
	if s != nil {
		return s, nil
	}
	c.openMu.Lock()
	defer c.openMu.Unlock()
	c.mu.Lock()
	s, closed := c.sess, c.closed
	c.mu.Unlock()
	if closed {
		return nil, scheduler.ErrClosed
	}
	if s != nil {
		return s, nil
	}
	stream, cancel, err := c.dialSession(ctx)
	if err != nil {
		return nil, err
	}
	s = &session{c: c, stream: stream, cancel: cancel, ended: make(chan struct{}), leases: map[uint64]*sLease{},
		wake: make(chan struct{}, 1)}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		cancel()
		return nil, scheduler.ErrClosed
	}
	c.sess = s
	c.wg.Add(2)
	go s.recvLoop()
	go s.sendLoop()
	return s, nil
}

// dialSession opens a Session stream on c's transport; cancel ends it.
// ctx bounds only the opening.
func (c *Client) dialSession(ctx context.Context) (sessionStream, func(), error) {
	now := c.opts.Clock.Now()
	tr := c.opts.Transport
	if tr == TransportFramed || (tr == TransportAuto && !now.Before(c.framedRetry)) {
		fc, err := c.dialFramed(ctx, now)
		switch {
		case err == nil:
			return fc, func() { _ = fc.Close() }, nil
		case tr == TransportAuto && errors.Is(err, framed.ErrProtocol):
			// A service older than the framed transport, or an HTTP/2
			// proxy in between: gRPC sessions until the next try (a
			// service upgraded in place is then used fully).
			c.framedRetry = now.Add(sessionRetry)
		default:
			return nil, nil, err
		}
	}
	sctx, cancel := context.WithCancel(context.Background())
	stop := context.AfterFunc(ctx, cancel)
	stream, err := c.api.Session(sctx)
	if !stop() {
		cancel()
		return nil, nil, fmt.Errorf("%w: %w", scheduler.ErrCancelled, ctx.Err())
	}
	if err != nil {
		cancel()
		return nil, nil, err
	}
	return stream, cancel, nil
}

// dialFramed opens a framed session. After a failed dial, admissions fail
// at once (to the failure mode) until the backoff passes, as gRPC's
// reconnect backoff does: a service that is down costs each request no
// dial. Called with c.openMu held.
func (c *Client) dialFramed(ctx context.Context, now time.Time) (*framed.ClientConn, error) {
	if now.Before(c.dialRetry) {
		return nil, c.dialErr
	}
	dctx, done := context.WithTimeout(ctx, c.opts.Timeout)
	defer done()
	fc, err := framed.DialToken(dctx, c.target, c.opts.TLS, c.opts.Token)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w: %w", scheduler.ErrCancelled, ctx.Err())
		}
		if !errors.Is(err, framed.ErrProtocol) {
			c.dialBackoff = min(max(2*c.dialBackoff, 100*time.Millisecond), time.Second)
			c.dialRetry, c.dialErr = now.Add(c.dialBackoff), err
		}
		return nil, err
	}
	c.dialBackoff = 0
	return fc, nil
}

// admit sends req's Start and waits for the answer or ctx's end.
func (s *session) admit(ctx context.Context, start *schedulerv1.Start) (*sLease, *schedulerv1.LeaseResponse, error) {
	c := s.c
	c.mu.Lock()
	if s.dead {
		c.mu.Unlock()
		return nil, nil, s.cause()
	}
	s.next++
	l := &sLease{s: s, id: s.next, answer: make(chan answer, 1), preempt: make(chan struct{}), start: start}
	s.leases[l.id] = l
	s.enqueue(l, false)
	c.mu.Unlock()
	s.stamp("cli.admit", l.id)
	// The caller waits for the answer anyway: it sends the Start itself
	// (with whatever else is queued) unless a send is under way.
	s.flush()
	select {
	case a := <-l.answer:
		s.stamp("cli.got", l.id)
		return l, a.msg, a.err
	case <-ctx.Done():
		// Withdraw: a Done for a request still waiting takes it out of
		// the service's queue, and releases an admission already made.
		l.Release(scheduler.Cancelled)
		return nil, nil, fmt.Errorf("%w: %w", scheduler.ErrCancelled, ctx.Err())
	}
}

func (s *session) cause() error {
	if s.err != nil {
		return s.err
	}
	return errSessionEnded
}

// enqueue marks l as having something to send, waking the sender when
// wake is set (the caller does not flush itself); c.mu is held.
func (s *session) enqueue(l *sLease, wake bool) {
	if s.dead {
		return
	}
	if !l.queued {
		l.queued = true
		s.queue = append(s.queue, l)
	}
	if wake {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

// sendLoop sends what Progress and Release queue (they never block the
// request's own goroutine on the stream), Options.ReportDelay after the
// first of them unless an Admit's flush has taken them by then.
func (s *session) sendLoop() {
	defer s.c.wg.Done()
	delay := s.c.opts.ReportDelay
	var t clock.Timer
	defer func() {
		if t != nil {
			t.Stop()
		}
	}()
	for {
		select {
		case <-s.wake:
		case <-s.ended:
			return
		}
		if delay > 0 {
			if t == nil {
				t = s.c.opts.Clock.NewTimer(delay)
			} else {
				t.Reset(delay)
			}
			select {
			case <-t.C():
			case <-s.ended:
				return
			}
			// What the pokes of the wait announced is queued already: the
			// flush below takes it, so they need no round of their own.
			select {
			case <-s.wake:
			default:
			}
		}
		s.flush()
	}
}

// flush sends every queued lease's Start, latest Progress and Done, all in
// one message, unless another goroutine is sending: that one sends them
// after its own (flat combining; sendMu guards Send and spare). Called
// without c.mu.
func (s *session) flush() {
	c := s.c
	for {
		if !s.sendMu.TryLock() {
			return // the holder looks at the queue again after unlocking
		}
		for {
			c.mu.Lock()
			batch := s.queue
			s.queue = s.spare[:0]
			msgs := s.messages(batch)
			c.mu.Unlock()
			clear(batch)
			s.spare = batch
			if len(batch) == 0 {
				break
			}
			if len(msgs) > 0 && !s.broken {
				// Send marshals before it returns: the messages are free
				// again after it.
				s.req.Leases = msgs
				err := s.stream.Send(&s.req)
				s.req.Leases = nil
				if trace.IsEnabled() {
					for _, m := range msgs {
						if m.GetStart() != nil {
							s.stamp("cli.sent", m.GetLease())
						}
					}
				}
				if err != nil {
					// The stream is broken; recvLoop gets its error and
					// ends the session.
					s.broken = true
				}
			}
			clear(msgs)
			s.msgs = msgs[:0]
		}
		s.sendMu.Unlock()
		// Something queued after the last look but before the unlock
		// found the lock taken: send it now.
		c.mu.Lock()
		pending := len(s.queue) > 0
		c.mu.Unlock()
		if !pending {
			return
		}
	}
}

// messages builds the messages of the queued leases in s.msgs, the
// Starts first: the service answers them before it applies the reports
// that ride along (a release costs it a scheduler step), so those add
// nothing to the decision latency. c.mu and s.sendMu are held.
func (s *session) messages(batch []*sLease) []*schedulerv1.LeaseRequest {
	msgs := s.msgs[:0]
	for _, l := range batch {
		if start := l.start; start != nil {
			l.start = nil
			if l.released {
				// Withdrawn before the service heard of it: nothing to
				// send at all.
				l.queued = false
				continue
			}
			l.startMsg.Start = start
			l.startReq.Lease, l.startReq.Msg = l.id, &l.startMsg
			msgs = append(msgs, &l.startReq)
		}
	}
	for _, l := range batch {
		if !l.queued {
			continue // withdrawn above
		}
		l.queued = false
		if l.progress != l.sent {
			l.sent = l.progress
			l.progressBody.FirstToken, l.progressBody.Tokens = l.progress.FirstToken, clampU32(l.progress.Tokens)
			l.progressMsg.Progress = &l.progressBody
			l.progressReq.Lease, l.progressReq.Msg = l.id, &l.progressMsg
			msgs = append(msgs, &l.progressReq)
		}
		if l.released {
			l.doneBody.Outcome = wireOutcome(l.outcome)
			l.doneMsg.Done = &l.doneBody
			l.doneReq.Lease, l.doneReq.Msg = l.id, &l.doneMsg
			msgs = append(msgs, &l.doneReq)
		}
	}
	return msgs
}

// recvLoop is the only caller of Recv: it hands each lease its answer and
// its preemption, and ends the session when the stream ends.
func (s *session) recvLoop() {
	c := s.c
	defer c.wg.Done()
	for {
		m, err := s.stream.Recv()
		if err != nil {
			s.end(err)
			return
		}
		c.mu.Lock()
		for _, r := range m.GetLeases() {
			l := s.leases[r.GetLease()]
			if l == nil {
				continue // released meanwhile
			}
			switch r.GetMsg().(type) {
			case *schedulerv1.LeaseResponse_Admitted:
				s.stamp("cli.recv", l.id)
				l.answer <- answer{msg: r}
			case *schedulerv1.LeaseResponse_Rejected:
				delete(s.leases, l.id)
				l.released = true
				l.answer <- answer{msg: r}
			case *schedulerv1.LeaseResponse_Preempt:
				if !l.preempted {
					l.preempted = true
					close(l.preempt)
				}
			}
		}
		c.mu.Unlock()
	}
}

// end closes the session: requests waiting for an answer get err (the
// failure mode applies to them); admitted leases stay valid but can no
// longer be preempted, and their Release sends nothing (the service
// released them when the stream ended).
func (s *session) end(err error) {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if s.dead {
		return
	}
	s.dead = true
	s.err = err
	if c.sess == s {
		c.sess = nil
	}
	for id, l := range s.leases {
		delete(s.leases, id)
		// A request still waiting gets err; for one already answered the
		// buffer is full or nobody reads it any more.
		select {
		case l.answer <- answer{err: err}:
		default:
		}
		l.released = true
	}
	s.queue = nil
	s.cancel()
	close(s.ended)
}

func (l *sLease) Preempt() <-chan struct{} { return l.preempt }

func (l *sLease) QueueTime() time.Duration { return l.queue }

// Endpoint is the endpoint the service bound the admission to (see
// scheduler.Routed).
func (l *sLease) Endpoint() string { return l.endpoint }

// Progress records the latest progress; the session's sender forwards it,
// coalescing bursts, so calling it per chunk costs a lock.
func (l *sLease) Progress(p scheduler.Progress) {
	c := l.s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if l.released || p == l.progress {
		return
	}
	l.progress = p
	l.s.enqueue(l, true)
}

// Release tells the service the outcome; extra calls are ignored.
func (l *sLease) Release(o scheduler.Outcome) {
	c := l.s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if l.released {
		return
	}
	l.released, l.outcome = true, o
	delete(l.s.leases, l.id)
	l.s.enqueue(l, true)
}

// stamp marks a lease's step in a Go execution trace, when one is running
// (scheduler bench --trace): what the decision latency's parts are made
// of. Without a trace it costs an atomic load.
func (s *session) stamp(step string, id uint64) {
	if trace.IsEnabled() {
		trace.Log(context.Background(), step, fmt.Sprintf("%p/%d", s, id))
	}
}
