package client

import (
	"sync"
	"time"

	"github.com/llmesh/llmesh/api/schedulerv1"
	"github.com/llmesh/llmesh/scheduler"
)

// lease is an admission held through one service stream.
type lease struct {
	c        *Client
	stream   schedulerv1.Scheduler_AdmitClient
	cancel   func()
	preempt  chan struct{}
	queue    time.Duration
	endpoint string // the pool endpoint the service bound the admission to

	mu       sync.Mutex
	progress scheduler.Progress
	sent     scheduler.Progress
	outcome  scheduler.Outcome
	released bool
	wake     chan struct{} // cap 1: progress or release pending
}

// doneWait bounds how long a released lease waits for the service to end
// the stream after Done before cutting it.
const doneWait = 5 * time.Second

// newLease starts the lease's goroutines, or reports false when the client
// was closed meanwhile (then the stream is cut, which releases it).
func (c *Client) newLease(stream schedulerv1.Scheduler_AdmitClient, cancel func(), queue time.Duration, endpoint string) (*lease, bool) {
	l := &lease{c: c, stream: stream, cancel: cancel, preempt: make(chan struct{}), queue: queue, endpoint: endpoint,
		wake: make(chan struct{}, 1)}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		cancel()
		return nil, false
	}
	// Added under c.mu, so never after Close has begun waiting.
	c.live[l] = struct{}{}
	c.wg.Add(2)
	recvDone := make(chan struct{})
	go l.receive(recvDone)
	go l.send(recvDone)
	return l, true
}

func (l *lease) receive(done chan<- struct{}) {
	defer l.c.wg.Done()
	defer close(done)
	closed := false
	for {
		m, err := l.stream.Recv()
		if err != nil {
			// Released, or the service went away: then the lease stays
			// valid here but can no longer be preempted.
			return
		}
		if m.GetPreempt() != nil && !closed {
			closed = true
			close(l.preempt)
		}
	}
}

func (l *lease) send(recvDone <-chan struct{}) {
	defer l.c.wg.Done()
	defer l.c.untrack(l)
	defer l.cancel()
	for {
		select {
		case <-l.wake:
		case <-recvDone:
			return
		}
		l.mu.Lock()
		p, changed := l.progress, l.progress != l.sent
		l.sent = p
		released, o := l.released, l.outcome
		l.mu.Unlock()
		if changed {
			if err := l.stream.Send(&schedulerv1.AdmitRequest{Msg: &schedulerv1.AdmitRequest_Progress{Progress: &schedulerv1.Progress{
				FirstToken: p.FirstToken, Tokens: clampU32(p.Tokens),
			}}}); err != nil {
				return
			}
		}
		if released {
			if l.stream.Send(&schedulerv1.AdmitRequest{Msg: &schedulerv1.AdmitRequest_Done{Done: &schedulerv1.Done{Outcome: wireOutcome(o)}}}) == nil {
				_ = l.stream.CloseSend()
				t := time.NewTimer(doneWait)
				select {
				case <-recvDone:
				case <-t.C:
				}
				t.Stop()
			}
			return
		}
	}
}

func wireOutcome(o scheduler.Outcome) schedulerv1.Outcome {
	switch o {
	case scheduler.Failed:
		return schedulerv1.Outcome_OUTCOME_FAILED
	case scheduler.Cancelled:
		return schedulerv1.Outcome_OUTCOME_CANCELLED
	case scheduler.Preempted:
		return schedulerv1.Outcome_OUTCOME_PREEMPTED
	case scheduler.Unreachable:
		return schedulerv1.Outcome_OUTCOME_UNREACHABLE
	}
	return schedulerv1.Outcome_OUTCOME_DONE
}

func (l *lease) signal() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

func (l *lease) Preempt() <-chan struct{} { return l.preempt }

func (l *lease) QueueTime() time.Duration { return l.queue }

var _ scheduler.Routed = (*lease)(nil)

// Endpoint is the endpoint the service bound the admission to (see
// scheduler.Routed).
func (l *lease) Endpoint() string { return l.endpoint }

// Progress records the latest progress; the sender forwards it, coalescing
// bursts, so calling it per chunk costs a mutex and a channel poke.
func (l *lease) Progress(p scheduler.Progress) {
	l.mu.Lock()
	if l.released || p == l.progress {
		l.mu.Unlock()
		return
	}
	l.progress = p
	l.mu.Unlock()
	l.signal()
}

// Release tells the service the outcome and ends the stream; extra calls
// are ignored.
func (l *lease) Release(o scheduler.Outcome) {
	l.mu.Lock()
	if l.released {
		l.mu.Unlock()
		return
	}
	l.released, l.outcome = true, o
	l.mu.Unlock()
	l.signal()
}
