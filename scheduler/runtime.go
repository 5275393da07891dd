package scheduler

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/llmesh/llmesh/clock"
)

// Scheduler is the in-process scheduler hosts use: a Machine driven in real
// (or scaled, or fake) time by one mutex and one clock timer. It implements
// Admitter. See doc.go for what the mutex guards.
type Scheduler struct {
	clk clock.Clock

	mu      sync.Mutex
	m       *Machine
	waiters map[Ticket]*waiter
	leases  map[Ticket]*lease
	timer   clock.Timer
	wake    time.Time
	closed  bool
}

var _ Admitter = (*Scheduler)(nil)

type waiter struct {
	ch chan admitResult // buffered 1; written once under mu
}

type admitResult struct {
	l   *lease
	err error
}

// New returns a scheduler for cfg on clk; a nil clk means clock.Real{}.
func New(cfg Config, clk clock.Clock) (*Scheduler, error) {
	m, err := NewMachine(cfg)
	if err != nil {
		return nil, err
	}
	if clk == nil {
		clk = clock.Real{}
	}
	return &Scheduler{clk: clk, m: m, waiters: map[Ticket]*waiter{}, leases: map[Ticket]*lease{}}, nil
}

// Admit blocks until req is admitted, rejected, or ctx ends (see Admitter).
func (s *Scheduler) Admit(ctx context.Context, req Request) (Lease, error) {
	return s.AdmitQueued(ctx, req, nil)
}

// AdmitQueued is Admit that calls queued (when not nil) once req has its
// place in the queue, or was admitted at once, before it blocks; it is not
// called when req is refused before queueing. A caller handing requests over
// from another scheduler waits on it to keep their order.
func (s *Scheduler) AdmitQueued(ctx context.Context, req Request, queued func()) (Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCancelled, err)
	}
	p, err := s.Queue(req)
	if err != nil {
		return nil, err
	}
	if queued != nil {
		queued()
	}
	return p.Wait(ctx)
}

// Pending is a request Queue placed: decided at once (Decided) or waiting
// for its turn (Wait).
type Pending struct {
	s *Scheduler
	t Ticket
	w waiter // in s.waiters while the request waits
	r admitResult
	// decided: r holds the answer, taken from w.ch.
	decided bool
}

// Queue places req in its queue and runs the step its arrival causes,
// without waiting: the answer is there at once when that step admitted or
// rejected it (Decided), else Wait waits for it. Admit is Queue and Wait.
// Errors are Admit's for a request refused before queueing.
func (s *Scheduler) Queue(req Request) (*Pending, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	now := s.clk.Now()
	t, err := s.m.Arrive(now, req)
	if err != nil {
		return nil, err
	}
	p := &Pending{s: s, t: t, w: waiter{ch: make(chan admitResult, 1)}}
	s.waiters[t] = &p.w
	s.stepLocked(now)
	return p, nil
}

// Decided returns the answer when there is one already, without waiting;
// ok is false while the request still waits.
func (p *Pending) Decided() (l Lease, err error, ok bool) {
	if !p.decided {
		select {
		case p.r = <-p.w.ch:
			p.decided = true
		default:
			return nil, nil, false
		}
	}
	return p.result()
}

func (p *Pending) result() (Lease, error, bool) {
	if p.r.err != nil {
		return nil, p.r.err, true
	}
	return p.r.l, nil, true
}

// Wait blocks until the request is admitted, rejected, or ctx ends (then it
// leaves the queue, as with Admit).
func (p *Pending) Wait(ctx context.Context) (Lease, error) {
	if p.decided {
		l, err, _ := p.result()
		return l, err
	}
	s := p.s
	select {
	case r := <-p.w.ch:
		p.r, p.decided = r, true
		l, err, _ := p.result()
		return l, err
	case <-ctx.Done():
	}
	s.mu.Lock()
	select {
	case r := <-p.w.ch:
		// Admitted (or rejected) while ctx ended: the caller will not use
		// the lease, so it is released here.
		if r.l != nil {
			s.releaseLocked(r.l, Cancelled)
		}
	default:
		delete(s.waiters, p.t)
		now := s.clk.Now()
		s.m.Cancel(now, p.t)
		s.stepLocked(now)
	}
	s.mu.Unlock()
	return nil, fmt.Errorf("%w: %w", ErrCancelled, ctx.Err())
}

// stepLocked runs the machine, hands out its decisions and arms the timer
// for its next wake-up.
func (s *Scheduler) stepLocked(now time.Time) {
	d := s.m.Step(now)
	for _, t := range d.Admitted {
		w := s.waiters[t]
		delete(s.waiters, t)
		e := s.m.entries.get(t)
		l := &lease{s: s, t: t, preempt: make(chan struct{}), queue: now.Sub(e.Arrival), endpoint: e.ep.Name}
		s.leases[t] = l
		w.ch <- admitResult{l: l}
	}
	for _, r := range d.Rejected {
		w := s.waiters[r.Ticket]
		delete(s.waiters, r.Ticket)
		w.ch <- admitResult{err: r.Err}
	}
	for _, t := range d.Preempted {
		if l := s.leases[t]; l != nil {
			close(l.preempt)
			if l.onPreempt != nil {
				l.onPreempt()
			}
		}
	}
	s.armLocked(now, d.Wake)
}

func (s *Scheduler) armLocked(now, wake time.Time) {
	if wake.Equal(s.wake) {
		return
	}
	s.wake = wake
	if wake.IsZero() {
		if s.timer != nil {
			s.timer.Stop()
		}
		return
	}
	d := max(0, wake.Sub(now))
	if s.timer == nil {
		s.timer = s.clk.AfterFunc(d, s.tick)
		return
	}
	s.timer.Reset(d)
}

// tick is the timer's callback: a wake-up the machine asked for.
func (s *Scheduler) tick() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.wake = time.Time{}
	s.stepLocked(s.clk.Now())
}

func (s *Scheduler) releaseLocked(l *lease, o Outcome) {
	if l.released {
		return
	}
	l.released = true
	delete(s.leases, l.t)
	now := s.clk.Now()
	s.m.Finish(now, l.t, o)
	if !s.closed {
		s.stepLocked(now)
	}
}

// SetLimit changes a pool's admission limit; see Machine.SetLimit.
func (s *Scheduler) SetLimit(pool string, n int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.m.SetLimit(pool, n); err != nil {
		return err
	}
	if !s.closed {
		s.stepLocked(s.clk.Now())
	}
	return nil
}

// SetEndpointLimit changes one endpoint's limit; see
// Machine.SetEndpointLimit.
func (s *Scheduler) SetEndpointLimit(pool, endpoint string, n int) error {
	return s.endpointChange(func() error { return s.m.SetEndpointLimit(pool, endpoint, n) })
}

// SetEndpointHealth drains an endpoint or brings it back; see
// Machine.SetEndpointHealth.
func (s *Scheduler) SetEndpointHealth(pool, endpoint string, healthy bool) error {
	return s.endpointChange(func() error { return s.m.SetEndpointHealth(pool, endpoint, healthy) })
}

// SetEndpointLoad records an endpoint's own load report; see
// Machine.SetEndpointLoad.
// It also checks whether the engine released preempted requests' slots
// (abort.go) and logs on slog's default logger when it marks the pool as
// not honouring aborts (warning, once per mark), when a probe preemption
// of a marked pool fails (warning) and when one lifts the mark (info).
func (s *Scheduler) SetEndpointLoad(pool, endpoint string, l EndpointLoad) error {
	return s.endpointChange(func() error {
		change, err := s.m.ObserveEndpointLoad(s.clk.Now(), pool, endpoint, l)
		attrs := []any{"pool", pool, "endpoint", endpoint, "engine_running", l.Running, "engine_waiting", l.Waiting}
		if at, ok := s.m.NextAbortProbe(pool); ok {
			attrs = append(attrs, "next_probe_in", at.Sub(s.clk.Now()))
		}
		switch change {
		case AbortMarked:
			slog.Warn("scheduler: engine keeps preempted requests running (abort not honoured); preemption is off for the pool", attrs...)
		case AbortProbeFailed:
			slog.Warn("scheduler: probe preemption freed nothing either (abort not honoured); preemption stays off for the pool", attrs...)
		case AbortUnmarked:
			slog.Info("scheduler: probe preemption was honoured by the engine; preemption is back on for the pool", attrs...)
		}
		return err
	})
}

func (s *Scheduler) endpointChange(f func() error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := f(); err != nil {
		return err
	}
	if !s.closed {
		s.stepLocked(s.clk.Now())
	}
	return nil
}

// Stats returns a snapshot of every pool.
func (s *Scheduler) Stats() []PoolStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m.Stats()
}

// Close rejects every waiting request with ErrClosed and refuses new ones.
// Leases already handed out stay valid and are still released normally;
// they are no longer preempted. Close is idempotent.
func (s *Scheduler) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if s.timer != nil {
		s.timer.Stop()
	}
	now := s.clk.Now()
	for t, w := range s.waiters {
		s.m.Cancel(now, t)
		w.ch <- admitResult{err: ErrClosed}
		delete(s.waiters, t)
	}
	return nil
}

// lease is one admission by a Scheduler.
type lease struct {
	s        *Scheduler
	t        Ticket
	preempt  chan struct{}
	queue    time.Duration
	endpoint string
	released bool // guarded by s.mu
	// onPreempt is called (under s.mu) when the lease is preempted; see
	// OnPreempt. Guarded by s.mu.
	onPreempt func()
}

var (
	_ Lease           = (*lease)(nil)
	_ Routed          = (*lease)(nil)
	_ PreemptNotifier = (*lease)(nil)
)

func (l *lease) Endpoint() string { return l.endpoint }

func (l *lease) Preempt() <-chan struct{} { return l.preempt }

// OnPreempt implements PreemptNotifier.
func (l *lease) OnPreempt(f func()) {
	l.s.mu.Lock()
	select {
	case <-l.preempt:
		l.s.mu.Unlock()
		f()
		return
	default:
	}
	l.onPreempt = f
	l.s.mu.Unlock()
}

func (l *lease) QueueTime() time.Duration { return l.queue }

func (l *lease) Progress(p Progress) {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	if l.released {
		return
	}
	now := l.s.clk.Now()
	if l.s.m.progress(now, l.t, p) && !l.s.closed {
		// A first token freed prefill budget (max_prefill_tokens): waiting
		// requests may fit now.
		l.s.stepLocked(now)
	}
}

func (l *lease) Release(o Outcome) {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	l.s.releaseLocked(l, o)
}
