package pools

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/llmesh/llmesh/scheduler"
)

// waiter is one Admit call. seq, turn and arrived are guarded by Set.mu;
// migrant belongs to the Admit goroutine.
type waiter struct {
	seq uint64 // first-arrival order, kept across moves
	// turn is set when the waiter's scheduler was replaced: closed when it
	// may queue on the new one.
	turn chan struct{}
	// arrived is set with turn: fired when the waiter has its place in the
	// new scheduler's queue, or Admit returned, so finishMove hands the
	// next turn out.
	arrived *signal
	migrant bool
}

// signal is a channel closed at most once, by whichever comes first.
type signal struct {
	ch   chan struct{}
	once sync.Once
}

func newSignal() *signal { return &signal{ch: make(chan struct{})} }

// fire closes the channel; nil-safe and idempotent.
func (g *signal) fire() {
	if g != nil {
		g.once.Do(func() { close(g.ch) })
	}
}

// settled fires w's current signal: Admit returned.
func (s *Set) settled(w *waiter) {
	s.mu.Lock()
	g := w.arrived
	s.mu.Unlock()
	g.fire()
}

// enter resolves pool ("" is the first pool) to its current runtime and
// registers w there as waiting. While the pool's waiting requests move to
// a new scheduler, a request that was not among them gets gate instead, to
// wait on before trying again.
func (s *Set) enter(pool string, w *waiter) (rt *runtime, gate <-chan struct{}, arrived *signal, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, nil, nil, scheduler.ErrClosed
	}
	if pool == "" && len(s.order) > 0 {
		pool = s.order[0]
	}
	sl := s.slots[pool]
	if sl == nil || sl.cur == nil {
		return nil, nil, nil, fmt.Errorf("%w: unknown pool %q", scheduler.ErrRejected, pool)
	}
	if sl.moved != nil && !w.migrant {
		return nil, sl.moved, nil, nil
	}
	if w.seq == 0 {
		s.seq++
		w.seq = s.seq
	}
	w.turn = nil
	sl.cur.waiting[w] = struct{}{}
	return sl.cur, nil, w.arrived, nil
}

// leave unregisters w from rt, counts l (the lease rt granted, or nil)
// against rt in the same step, so a replacement never misses it, and
// returns w's turn (nil unless rt was replaced while w waited).
func (s *Set) leave(rt *runtime, w *waiter, l scheduler.Lease) chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(rt.waiting, w)
	if l != nil {
		rt.live++
		if rt.retired {
			// Admitted just before the replacement counted its leases.
			rt.slot.carried++
			s.applyLocked(rt.slot)
		}
	}
	s.maybeFoldLocked(rt)
	return w.turn
}

// move is a replacement whose waiting requests are moving over.
type move struct {
	sl      *slot
	sched   *scheduler.Scheduler
	waiters []*waiter // in first-arrival order
	arrived []*signal // each waiter's, in the same order
}

// moveWait bounds how long a replacement waits for the moved requests to
// queue again; they need only be scheduled (one that gave up meanwhile is
// skipped as soon as its Admit returns).
const moveWait = 2 * time.Second

// placeholder admits one placeholder request to sc, fresh and empty, at
// limit 1, or returns nil where there is none: with a batch window (nothing
// is admitted before the next tick anyway), or if sc does not admit it at
// once. It is in the most urgent class, so it is never a preemption victim.
func placeholder(sc *scheduler.Scheduler, p scheduler.PoolConfig, cfg scheduler.Config) scheduler.Lease {
	if p.BatchWindow > 0 {
		return nil
	}
	urgent := cfg.Classes[0]
	for _, c := range cfg.Classes[1:] {
		if c.Priority < urgent.Priority {
			urgent = c
		}
	}
	if err := sc.SetLimit(p.Name, 1); err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), placeholderWait)
	defer cancel()
	hold, err := sc.Admit(ctx, scheduler.Request{Pool: p.Name, Class: urgent.Name, Requeue: true})
	if err != nil {
		return nil
	}
	return hold
}

// placeholderWait bounds the placeholder's admission, which an empty
// scheduler grants at once.
const placeholderWait = time.Second

// prepareLocked readies sc, the scheduler replacing sl.cur, before it
// becomes current; hold is its placeholder (or nil). s.mu is held.
//
// Waiting requests must arrive at sc one at a time, oldest first: a
// scheduler's queue keeps each class in the order requests arrived in it.
// So each gets a turn, which finishMove hands out in order, and new
// requests for the pool wait behind them (enter's gate). Meanwhile sc must
// admit none of them (it would admit whoever came first), and afterwards
// the old leases must count against its limit even when they fill it all
// (a limit cannot go below 1). The placeholder, taking sc's one slot, does
// both; applyLocked releases it once the pool has a free slot and nothing
// is moving. ok is false when nothing waits; stale is the replaced
// scheduler's own placeholder, for the caller to release once that
// scheduler is closed (before, it would admit a waiter into the freed
// slot).
func (s *Set) prepareLocked(sl *slot, sc *scheduler.Scheduler, hold scheduler.Lease) (mv move, ok bool, stale scheduler.Lease) {
	if sl.hold != nil {
		stale = sl.hold
		sl.hold = nil
		sl.holdsDone++
	}
	if hold != nil {
		sl.hold = hold
		sl.holds++
	}
	if len(sl.cur.waiting) == 0 {
		return move{}, false, stale
	}
	mv = move{sl: sl, sched: sc}
	for w := range sl.cur.waiting {
		w.turn = make(chan struct{})
		w.arrived = newSignal()
		mv.waiters = append(mv.waiters, w)
	}
	slices.SortFunc(mv.waiters, func(a, b *waiter) int { return cmp.Compare(a.seq, b.seq) })
	for _, w := range mv.waiters {
		mv.arrived = append(mv.arrived, w.arrived)
	}
	sl.moved = make(chan struct{})
	return mv, true, stale
}

// finishMove hands out the turns in order, each once the previous waiter
// has its place in the new scheduler's queue (or gave up), at most moveWait
// in all; then it lets new requests in and sets the pool's real limit
// (which releases the placeholder when a slot is free), so the new
// scheduler admits in its policy's order.
func (s *Set) finishMove(mv move) {
	// A hand-over between goroutines, not a scheduling delay: wall time,
	// whatever clock the schedulers run on.
	bound := time.NewTimer(moveWait)
	defer bound.Stop()
	late := false
	for i, w := range mv.waiters {
		close(w.turn)
		if late {
			continue
		}
		select {
		case <-mv.arrived[i].ch:
		case <-bound.C:
			late = true
		}
	}
	s.mu.Lock()
	close(mv.sl.moved)
	mv.sl.moved = nil
	s.applyLocked(mv.sl)
	s.mu.Unlock()
}
