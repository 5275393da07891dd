package pools

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"

	"github.com/llmesh/llmesh/clock"
	"github.com/llmesh/llmesh/scheduler"
)

// Set is a reloadable scheduler.Admitter: one in-process
// scheduler.Scheduler per pool, so that a config change replaces exactly the
// pools whose settings changed and leaves the others (their queues, leases
// and learned estimates) alone. Both the shared scheduler service and the
// embedded gateway schedule through one.
//
// When Update replaces a pool's scheduler (its capacity or scheduler
// settings changed, or the classes did):
//   - requests waiting in the old one queue again in the new one, one at a
//     time in the order they first arrived, keeping their arrival time and
//     requeue flag, before the new one admits any of them; so it admits them
//     in its own policy's order, and requests that arrive meanwhile queue
//     behind them. Nothing waiting is dropped unless the new config rejects
//     it (a smaller queue.max_length, or the pool is gone);
//   - leases the old one handed out stay valid and are released normally;
//     until they are, they count against the new scheduler's limit (see
//     applyLocked), but they are no longer preempted and their tokens do
//     not count against max_inflight_tokens;
//   - the old scheduler's event counters are folded into the pool's Stats
//     (a moved waiter counts as cancelled there and arrived again here).
//
// Safe for concurrent use; see doc.go for what mu guards.
type Set struct {
	clk clock.Clock

	// upd serializes Update; it is taken before mu, never while holding it.
	upd sync.Mutex

	mu      sync.Mutex
	closed  bool
	order   []string // pool names in config order; order[0] is the default pool
	slots   map[string]*slot
	classes []scheduler.ClassConfig
	defCls  string
	seq     uint64 // numbers waiters in first-arrival order
}

var _ scheduler.Admitter = (*Set)(nil)

// slot is one pool name's schedulers: the current one and the replaced ones
// still holding leases. A slot outlives its pool's removal while replaced
// schedulers drain.
type slot struct {
	name    string
	cfg     scheduler.PoolConfig
	cur     *runtime // nil once the pool was removed
	retired []*runtime
	carried int           // leases of retired runtimes not yet released
	moved   chan struct{} // non-nil while waiting requests move to cur; closed after
	// hold is a placeholder lease taking cur's one slot while waiting
	// requests move to it, or while the leases of retired runtimes fill the
	// whole capacity (a scheduler's limit cannot go below 1); nil otherwise.
	hold scheduler.Lease
	// holds and holdsDone count placeholders admitted and released, left
	// out of the counters.
	holds, holdsDone uint64
	learned          int // capacity learned from the engine; 0: none
	past             scheduler.Counters
}

// runtime is one scheduler.Scheduler serving a single pool.
type runtime struct {
	sched   *scheduler.Scheduler
	slot    *slot
	live    int                  // leases handed out and not released
	waiting map[*waiter]struct{} // Admit calls inside sched.Admit
	retired bool
	folded  bool // its counters are in slot.past
}

// New builds one scheduler per pool of cfg on clk (nil: the real
// clock).
func New(cfg scheduler.Config, clk clock.Clock) (*Set, error) {
	if clk == nil {
		clk = clock.Real{}
	}
	s := &Set{clk: clk, slots: map[string]*slot{}}
	if err := s.Update(cfg); err != nil {
		return nil, err
	}
	return s, nil
}

// single is cfg narrowed to one pool.
func single(cfg scheduler.Config, p scheduler.PoolConfig) scheduler.Config {
	return scheduler.Config{Pools: []scheduler.PoolConfig{p}, Classes: cfg.Classes,
		DefaultClass: cfg.DefaultClass, PrefillPredictor: cfg.PrefillPredictor}
}

// samePool reports whether two pool configs schedule identically. Policies
// are compared by name: the registry holds one instance per name.
func samePool(a, b scheduler.PoolConfig) bool {
	if a.Policy == nil || b.Policy == nil || a.Policy.Name() != b.Policy.Name() {
		return false
	}
	a.Policy, b.Policy = nil, nil
	return reflect.DeepEqual(a, b)
}

// Update applies cfg: pools that are new or whose settings changed get a
// new scheduler (all of them when the classes changed), removed pools stop
// taking requests (their waiting requests are rejected as unknown pool),
// unchanged pools keep theirs. On error (cfg invalid) nothing changes.
func (s *Set) Update(cfg scheduler.Config) error {
	_, err := s.update(cfg)
	return err
}

// update is Update; it also returns the names of the pools it (re)built.
// It plans under the lock, builds outside it, installs under it again and
// stops what it replaced after, so that a scheduler's Close never runs
// under the Set's lock.
func (s *Set) update(cfg scheduler.Config) ([]string, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s.upd.Lock()
	defer s.upd.Unlock()
	keep, replace, closed := s.plan(cfg)
	if closed {
		return nil, scheduler.ErrClosed
	}
	fresh, holds, err := s.build(cfg, keep, replace)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		closeAll(fresh)
		return nil, scheduler.ErrClosed
	}
	var out retired
	built := s.installLocked(cfg, fresh, holds, &out)
	s.retireRemovedLocked(cfg, &out)
	s.classes = slices.Clone(cfg.Classes)
	s.defCls = cfg.DefaultClass
	s.mu.Unlock()
	s.finish(&out)
	return built, nil
}

// plan reports, per pool of cfg, whether its running scheduler is kept
// (same classes and settings) and whether one runs at all (a new one
// replaces it), and whether the Set is closed.
func (s *Set) plan(cfg scheduler.Config) (keep, replace []bool, closed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	classesSame := slices.Equal(s.classes, cfg.Classes) && s.defCls == cfg.DefaultClass
	for _, p := range cfg.Pools {
		sl := s.slots[p.Name]
		running := sl != nil && sl.cur != nil
		keep = append(keep, classesSame && running && samePool(sl.cfg, p))
		replace = append(replace, running)
	}
	return keep, replace, s.closed
}

// build makes the schedulers of the pools not kept. It runs outside the
// lock (and before changing anything) so that an error leaves the running
// set as it was; replacements get their placeholder here too, as admitting
// it takes the new scheduler's lock.
func (s *Set) build(cfg scheduler.Config, keep, replace []bool) ([]*scheduler.Scheduler, []scheduler.Lease, error) {
	fresh := make([]*scheduler.Scheduler, len(cfg.Pools))
	holds := make([]scheduler.Lease, len(cfg.Pools))
	for i, p := range cfg.Pools {
		if keep[i] {
			continue
		}
		sc, err := scheduler.New(single(cfg, p), s.clk)
		if err != nil {
			closeAll(fresh)
			return nil, nil, fmt.Errorf("pools[%d]: %w", i, err)
		}
		fresh[i] = sc
		if replace[i] {
			holds[i] = placeholder(sc, p, cfg)
		}
	}
	return fresh, holds, nil
}

// retired is what an update takes out of service, to stop once the lock
// is released.
type retired struct {
	stop  []*scheduler.Scheduler
	stale []scheduler.Lease
	moves []move
}

// installLocked puts the fresh schedulers in their slots, preparing the
// move of a replaced one's waiting requests, sets the pool order and
// returns the names of the pools it (re)built.
func (s *Set) installLocked(cfg scheduler.Config, fresh []*scheduler.Scheduler, holds []scheduler.Lease, out *retired) []string {
	var built []string
	order := make([]string, 0, len(cfg.Pools))
	for i, p := range cfg.Pools {
		order = append(order, p.Name)
		if fresh[i] == nil {
			continue // unchanged; upd keeps the plan valid
		}
		sl := s.slots[p.Name]
		if sl == nil {
			sl = &slot{name: p.Name}
			s.slots[p.Name] = sl
		}
		if sl.cur != nil {
			mv, ok, old := s.prepareLocked(sl, fresh[i], holds[i])
			if ok {
				out.moves = append(out.moves, mv)
			}
			if old != nil {
				out.stale = append(out.stale, old)
			}
			out.stop = append(out.stop, s.retireLocked(sl))
		}
		sl.cur = &runtime{sched: fresh[i], slot: sl, waiting: map[*waiter]struct{}{}}
		sl.cfg = p
		built = append(built, p.Name)
		s.applyLocked(sl)
	}
	s.order = order
	return built
}

// retireRemovedLocked takes the pools cfg no longer has out of service.
func (s *Set) retireRemovedLocked(cfg scheduler.Config, out *retired) {
	seen := make(map[string]bool, len(cfg.Pools))
	for _, p := range cfg.Pools {
		seen[p.Name] = true
	}
	for name, sl := range s.slots {
		if seen[name] || sl.cur == nil {
			continue
		}
		if sl.hold != nil {
			out.stale = append(out.stale, sl.hold)
			sl.hold = nil
			sl.holdsDone++
		}
		out.stop = append(out.stop, s.retireLocked(sl))
		sl.cur = nil
		if len(sl.retired) == 0 && s.slots[name] == sl {
			delete(s.slots, name)
		}
	}
}

// finish stops what an update retired. Closing hands every waiter
// ErrClosed; Admit then queues it again on the slot's new scheduler, which
// is already in place.
func (s *Set) finish(out *retired) {
	for _, sc := range out.stop {
		_ = sc.Close()
	}
	for _, l := range out.stale {
		l.Release(scheduler.Cancelled)
	}
	for _, mv := range out.moves {
		s.finishMove(mv)
	}
}

func closeAll(ss []*scheduler.Scheduler) {
	for _, sc := range ss {
		if sc != nil {
			_ = sc.Close()
		}
	}
}

// retireLocked moves sl's current runtime to its retired list and returns
// its scheduler for closing; s.mu is held.
func (s *Set) retireLocked(sl *slot) *scheduler.Scheduler {
	rt := sl.cur
	rt.retired = true
	sl.carried += rt.live
	sl.retired = append(sl.retired, rt)
	s.maybeFoldLocked(rt)
	return rt.sched
}

// maybeFoldLocked folds a retired runtime once nothing refers to it any
// more: no lease, no Admit call inside it (one may still come back with a
// lease).
func (s *Set) maybeFoldLocked(rt *runtime) {
	if rt.retired && rt.live == 0 && len(rt.waiting) == 0 {
		s.foldLocked(rt)
	}
}

// foldLocked adds a drained runtime's counters to its slot's past, once,
// and forgets it (and its slot, when the pool is gone and nothing else
// drains).
func (s *Set) foldLocked(rt *runtime) {
	if rt.folded {
		return
	}
	rt.folded = true
	sl := rt.slot
	for _, ps := range rt.sched.Stats() {
		addCounters(&sl.past, ps.Counters)
	}
	sl.retired = slices.DeleteFunc(sl.retired, func(r *runtime) bool { return r == rt })
	if sl.cur == nil && len(sl.retired) == 0 && s.slots[sl.name] == sl {
		delete(s.slots, sl.name)
	}
}

func addCounters(dst *scheduler.Counters, c scheduler.Counters) {
	dst.Arrived += c.Arrived
	dst.Requeued += c.Requeued
	dst.Admitted += c.Admitted
	dst.Rejected += c.Rejected
	dst.QueueFull += c.QueueFull
	dst.Cancelled += c.Cancelled
	dst.Done += c.Done
	dst.Failed += c.Failed
	dst.Preempted += c.Preempted
	dst.PreemptedDone += c.PreemptedDone
}

// applyLocked sets the current scheduler's limit: the learned (or static)
// capacity less the leases replaced schedulers still hold. While those
// fill it all, the limit is 1 and the placeholder (sl.hold) takes that one
// slot; without a placeholder (a batch window, or a learned limit that
// dropped later) one request may then run beyond the capacity.
func (s *Set) applyLocked(sl *slot) {
	if sl.cur == nil || sl.moved != nil {
		return
	}
	limit := sl.cfg.MaxInflight
	if sl.learned > 0 {
		limit = min(limit, sl.learned)
	}
	free := limit - sl.carried
	_ = sl.cur.sched.SetLimit(sl.name, max(1, free)) // the pool exists: it is the runtime's only one
	if sl.hold != nil && free >= 1 {
		h := sl.hold
		sl.hold = nil
		sl.holdsDone++
		h.Release(scheduler.Cancelled)
	}
}

// Admit queues req on its pool's current scheduler (see scheduler.Admitter).
// A request waiting when its pool's scheduler is replaced queues again on
// the new one, in its turn (see prepareLocked).
func (s *Set) Admit(ctx context.Context, req scheduler.Request) (scheduler.Lease, error) {
	a := s.admission(req)
	return a.run(ctx, true)
}

// AdmitNow is Admit without waiting: done is true with Admit's answer when
// the pool's scheduler decided in the step req's arrival caused (or
// refused it); otherwise the request waits in its queue and Pending.Wait
// finishes the Admit. The shared service answers most admissions this way,
// in the goroutine that received them.
func (s *Set) AdmitNow(ctx context.Context, req scheduler.Request) (l scheduler.Lease, err error, p *Pending) {
	a := s.admission(req)
	l, err = a.run(ctx, false)
	if a.pending() {
		return nil, nil, &Pending{a: a}
	}
	return l, err, nil
}

// Pending is an AdmitNow that waits in its queue.
type Pending struct{ a *admission }

// Wait finishes the Admit: it blocks until the request is admitted,
// rejected, or ctx ends (see scheduler.Admitter).
func (p *Pending) Wait(ctx context.Context) (scheduler.Lease, error) { return p.a.run(ctx, true) }

// admission is one Admit in progress: where it waits, so that a run that
// would block (AdmitNow's) can return and a later run go on from there.
type admission struct {
	s    *Set
	req  scheduler.Request
	w    *waiter // &wv
	wv   waiter
	tl   trackedLease // the lease handed out, in the same allocation
	last *runtime
	rt   *runtime           // where pend waits
	pend *scheduler.Pending // queued on rt, not yet answered
	gate <-chan struct{}    // waiting for the pool's moves to end
	turn chan struct{}      // waiting for the turn to queue on a successor
	done bool
}

func (s *Set) admission(req scheduler.Request) *admission {
	if req.Arrival.IsZero() {
		// Fixed now, so that a move to a new scheduler keeps the place.
		req.Arrival = s.clk.Now()
	}
	a := &admission{s: s, req: req}
	a.w = &a.wv
	return a
}

// pending reports whether the last run stopped at a wait.
func (a *admission) pending() bool { return !a.done }

// run goes on with the admission; with block false it returns (pending)
// where it would wait.
func (a *admission) run(ctx context.Context, block bool) (scheduler.Lease, error) {
	l, err, done := a.step(ctx, block)
	if done {
		a.done = true
		a.s.settled(a.w)
	}
	return l, err
}

func (a *admission) step(ctx context.Context, block bool) (scheduler.Lease, error, bool) {
	for {
		if ch := a.blocker(); ch != nil {
			// Requests already waiting are moving to a new scheduler, or
			// it is not yet this one's turn to queue on a successor.
			if !block {
				return nil, nil, false
			}
			select {
			case <-ch:
				a.unblock()
			case <-ctx.Done():
				return a.cancelled(ctx)
			}
			continue
		}
		if a.pend == nil {
			l, done, again, err := a.enqueue(ctx)
			if again {
				continue
			}
			if done {
				return l, err, true
			}
		}
		l, err, ok := a.pend.Decided()
		if !ok {
			if !block {
				return nil, nil, false
			}
			l, err = a.pend.Wait(ctx)
		}
		a.pend = nil
		if a.leave(l, err) {
			continue
		}
		if err != nil {
			return nil, err, true
		}
		a.tl = trackedLease{Lease: l, s: a.s, rt: a.rt}
		return &a.tl, nil, true
	}
}

// blocker is what the admission waits on before queueing: the pool's
// moves to end (a.gate), then its turn on a successor (a.turn); nil when
// neither.
func (a *admission) blocker() <-chan struct{} {
	if a.gate != nil {
		return a.gate
	}
	if a.turn != nil {
		return a.turn
	}
	return nil
}

// unblock clears the wait that blocker returned.
func (a *admission) unblock() {
	if a.gate != nil {
		a.gate = nil
		return
	}
	a.turn = nil
}

func (a *admission) cancelled(ctx context.Context) (scheduler.Lease, error, bool) {
	return nil, fmt.Errorf("%w: %w", scheduler.ErrCancelled, ctx.Err()), true
}

// enqueue queues the request on its pool's current scheduler (a.pend).
// again: try again (a gate to wait on, or the scheduler was replaced);
// done: the admission ended with l, err.
func (a *admission) enqueue(ctx context.Context) (l scheduler.Lease, done, again bool, err error) {
	s, w := a.s, a.w
	rt, gate, arrived, err := s.enter(a.req.Pool, w)
	if err != nil {
		return nil, true, false, err
	}
	if gate != nil {
		a.gate = gate
		return nil, false, true, nil
	}
	if rt == a.last {
		// Closed but still current: only Close does that.
		s.leave(rt, w, nil)
		return nil, true, false, scheduler.ErrClosed
	}
	a.last, a.rt = rt, rt
	if ctx.Err() != nil {
		s.leave(rt, w, nil)
		l, err, _ = a.cancelled(ctx)
		return l, true, false, err
	}
	p, err := rt.sched.Queue(a.req)
	switch {
	case err == nil:
		arrived.fire()
		a.pend = p
		return nil, false, false, nil
	case a.leave(nil, err):
		return nil, false, true, nil
	}
	return nil, true, false, err
}

// leave ends the wait on a.rt with its answer (l or err); true means the
// scheduler was replaced meanwhile and the request queues again on the
// successor (after a.turn, when set).
func (a *admission) leave(l scheduler.Lease, err error) bool {
	turn := a.s.leave(a.rt, a.w, l)
	if !errors.Is(err, scheduler.ErrClosed) {
		return false
	}
	// Replaced while waiting: queue again on the successor.
	if turn != nil {
		a.w.migrant = true
		a.turn = turn
	}
	return true
}

// trackedLease counts a lease against its runtime until released.
type trackedLease struct {
	scheduler.Lease
	s    *Set
	rt   *runtime
	once sync.Once
}

// Endpoint implements scheduler.Routed.
func (l *trackedLease) Endpoint() string { return scheduler.EndpointOf(l.Lease) }

var _ scheduler.PreemptNotifier = (*trackedLease)(nil)

// OnPreempt implements scheduler.PreemptNotifier (a Set's leases are a
// scheduler.Scheduler's, which do).
func (l *trackedLease) OnPreempt(f func()) { l.Lease.(scheduler.PreemptNotifier).OnPreempt(f) }

// Release implements scheduler.Lease.
func (l *trackedLease) Release(o scheduler.Outcome) {
	l.once.Do(func() {
		l.Lease.Release(o)
		s, rt := l.s, l.rt
		s.mu.Lock()
		defer s.mu.Unlock()
		rt.live--
		if !rt.retired {
			return
		}
		rt.slot.carried--
		s.maybeFoldLocked(rt)
		s.applyLocked(rt.slot)
	})
}

// SetLimit sets a pool's capacity learned from its engine (it implements
// capacity.Target); n is clamped to [1, max_inflight] like
// scheduler.Scheduler.SetLimit. It survives Update while the pool exists.
func (s *Set) SetLimit(pool string, n int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	sl := s.slots[pool]
	if sl == nil || sl.cur == nil {
		return fmt.Errorf("scheduler: unknown pool %q", pool)
	}
	sl.learned = max(1, n)
	s.applyLocked(sl)
	return nil
}

// ForgetLimit drops a learned capacity: the pool's max_inflight applies
// again (for a pool whose capacity is no longer learned). Unknown pools are
// ignored.
func (s *Set) ForgetLimit(pool string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sl := s.slots[pool]; sl != nil {
		sl.learned = 0
		s.applyLocked(sl)
	}
}

// Pools returns the pool names in config order.
func (s *Set) Pools() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.order)
}

// Stats returns one snapshot per pool in config order: the current
// scheduler's, with the in-flight work of replaced schedulers still
// draining and the event counters of all of them added.
func (s *Set) Stats() []scheduler.PoolStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]scheduler.PoolStats, 0, len(s.order))
	for _, name := range s.order {
		sl := s.slots[name]
		if sl == nil || sl.cur == nil {
			continue
		}
		st := sl.cur.sched.Stats()
		if len(st) != 1 {
			continue
		}
		ps := st[0]
		for _, rt := range sl.retired {
			for _, r := range rt.sched.Stats() {
				ps.InFlight += r.InFlight
				ps.InFlightTokens += r.InFlightTokens
				ps.Preempting += r.Preempting
				addCounters(&ps.Counters, r.Counters)
			}
		}
		addCounters(&ps.Counters, sl.past)
		// Placeholders arrived (as requeues), were admitted and cancelled.
		ps.Arrived -= sl.holds
		ps.Requeued -= sl.holds
		ps.Admitted -= sl.holds
		ps.Cancelled -= sl.holdsDone
		ps.InFlight -= int(sl.holds - sl.holdsDone)
		out = append(out, ps)
	}
	return out
}

// Close rejects every waiting request with scheduler.ErrClosed and refuses
// new ones; leases already handed out are still released normally. Close is
// idempotent.
func (s *Set) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	var all []*scheduler.Scheduler
	for _, sl := range s.slots {
		if sl.cur != nil {
			all = append(all, sl.cur.sched)
		}
		for _, rt := range sl.retired {
			all = append(all, rt.sched)
		}
	}
	s.mu.Unlock()
	for _, sc := range all {
		_ = sc.Close()
	}
	return nil
}

// EndpointBlocks returns the precise prefix index feed of endpoint of the
// current scheduler of pool (scheduler.Scheduler.EndpointBlocks). A
// scheduler built later by Update starts with an empty index: MeshSet
// restarts its KV-cache event subscribers then.
func (s *Set) EndpointBlocks(pool, endpoint string) (*scheduler.LockedBlockSink, error) {
	s.mu.Lock()
	sl := s.slots[pool]
	var sc *scheduler.Scheduler
	if sl != nil && sl.cur != nil {
		sc = sl.cur.sched
	}
	s.mu.Unlock()
	if sc == nil {
		return nil, fmt.Errorf("scheduler: unknown pool %q", pool)
	}
	return sc.EndpointBlocks(pool, endpoint)
}
