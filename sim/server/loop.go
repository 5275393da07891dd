package server

import (
	"context"
	"sync"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/llmesh/llmesh/clock"
	"github.com/llmesh/llmesh/sim"
)

// stream is one request's view of the engine: the engine loop writes it,
// the request's handler reads it. Fields below mu are guarded by it.
type stream struct {
	id       uint64
	spec     sim.SeqSpec
	arrival  time.Time
	notify   chan struct{} // cap 1: "something changed"
	mu       sync.Mutex
	output   int
	sched    time.Time // first scheduled (step start)
	first    time.Time // first token (step end)
	finish   time.Time // finished (step end)
	preempts int
	done     bool
	err      error // set when the engine refused the sequence
	lastTok  time.Time
}

// snapshot is a consistent copy of a stream's progress.
type snapshot struct {
	output   int
	sched    time.Time
	first    time.Time
	finish   time.Time
	preempts int
	done     bool
	err      error
}

func (s *stream) snapshot() snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return snapshot{s.output, s.sched, s.first, s.finish, s.preempts, s.done, s.err}
}

func (s *stream) wake() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// loop owns the engine. Handlers talk to it only through submit and abort;
// everything else in it is touched by the run goroutine alone.
type loop struct {
	clk     clock.Clock
	engine  *sim.Engine
	blocks  *blockEvents // nil: no KV-cache events
	metrics *metrics

	mu     sync.Mutex // guards inbox, aborts, closed
	inbox  []*stream
	aborts []uint64
	closed bool
	kick   chan struct{} // cap 1: work arrived

	live map[uint64]*stream // run goroutine only

	paceMu sync.Mutex // guards pace; the run goroutine writes it
	pace   paceStats
}

// Pace is how the engine loop kept to the timing model: a real GPU starts
// a step the moment the last one ends; this loop learns of the end from a
// timer, which fires late on a busy host.
type Pace struct {
	// Steps is the number of engine steps; Modelled the sum of their
	// modelled durations.
	Steps    int
	Modelled time.Duration
	// BackToBack counts steps that followed the previous one without the
	// engine idling; LateP50 and LateP99 are how late the loop woke up
	// for them (past the previous step's due time).
	BackToBack       int
	LateP50, LateP99 time.Duration
	// Drift is how far the back-to-back steps fell behind the model in
	// total: wake-up delays beyond the credit of half a step the loop
	// gives them. Drift / Modelled is the share by which the engine ran
	// slower than modelled.
	Drift time.Duration
}

type paceStats struct {
	steps, backToBack int
	modelled, drift   time.Duration
	late              *hdrhistogram.Histogram // µs
}

// record accounts one step of modelled duration d; for a back-to-back step
// late is the wake-up delay and drift the part of it not credited.
func (l *loop) record(d time.Duration, backToBack bool, late, drift time.Duration) {
	l.paceMu.Lock()
	defer l.paceMu.Unlock()
	p := &l.pace
	p.steps++
	p.modelled += d
	if !backToBack {
		return
	}
	if p.late == nil {
		p.late = hdrhistogram.New(1, 60_000_000, 2)
	}
	p.backToBack++
	p.drift += drift
	_ = p.late.RecordValue(max(1, late.Microseconds()))
}

func (l *loop) snapshotPace() Pace {
	l.paceMu.Lock()
	defer l.paceMu.Unlock()
	p := Pace{Steps: l.pace.steps, Modelled: l.pace.modelled, BackToBack: l.pace.backToBack, Drift: l.pace.drift}
	if h := l.pace.late; h != nil && h.TotalCount() > 0 {
		p.LateP50 = time.Duration(h.ValueAtQuantile(50)) * time.Microsecond
		p.LateP99 = time.Duration(h.ValueAtQuantile(99)) * time.Microsecond
	}
	return p
}

func newLoop(clk clock.Clock, e *sim.Engine, m *metrics) *loop {
	return &loop{clk: clk, engine: e, metrics: m, kick: make(chan struct{}, 1), live: map[uint64]*stream{}}
}

// submit queues st for the next step. It reports false once the loop has
// stopped.
func (l *loop) submit(st *stream) bool {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return false
	}
	l.inbox = append(l.inbox, st)
	l.mu.Unlock()
	select {
	case l.kick <- struct{}{}:
	default:
	}
	return true
}

// abort removes a sequence before the next step (its KV blocks are freed
// then, at most one step after the client went away).
func (l *loop) abort(id uint64) {
	l.mu.Lock()
	if !l.closed {
		l.aborts = append(l.aborts, id)
	}
	l.mu.Unlock()
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// drain moves queued submissions and aborts into the engine.
func (l *loop) drain() {
	l.mu.Lock()
	in, ab := l.inbox, l.aborts
	l.inbox, l.aborts = nil, nil
	l.mu.Unlock()
	for _, st := range in {
		if err := l.engine.Add(st.spec); err != nil {
			st.mu.Lock()
			st.err, st.done = err, true
			st.mu.Unlock()
			st.wake()
			continue
		}
		l.live[st.id] = st
	}
	for _, id := range ab {
		if l.engine.Abort(id) {
			l.metrics.aborted()
		}
		delete(l.live, id)
	}
	l.metrics.inSystem(len(l.live))
}

// run steps the engine on the clock until ctx ends, then fails every live
// stream.
func (l *loop) run(ctx context.Context) {
	defer l.shutdown()
	// One timer for all steps: at --time-scale 100 steps end thousands of
	// times a second, and a timer each was an allocation each.
	t := l.clk.NewTimer(time.Hour)
	t.Stop()
	defer t.Stop()
	// due is when the step just published should have ended on the timing
	// model (zero after the engine idled). A GPU starts its next step the
	// moment the last one ends, but this loop learns of the end from a
	// timer that fires late on a busy host (a millisecond or more); timing
	// each step from its late start would add every wake-up delay to the
	// engine's pace, and a run at nominal load 1.0 would really be
	// overloaded. Back-to-back steps are therefore timed from the previous
	// step's due time. The credit is at most half the step, so every step
	// still takes at least half its modelled time: a long stall of the
	// process is not replayed as a burst of instant steps, and each step's
	// tokens still go out in a chunk of their own when readers keep up.
	var due time.Time
	for {
		l.drain()
		l.metrics.gauges(l.engine)
		if l.engine.Idle() {
			due = time.Time{}
			select {
			case <-ctx.Done():
				return
			case <-l.kick:
				continue
			}
		}
		now := l.clk.Now()
		r := l.engine.Step(now)
		l.blocks.flush(now)
		// Gauges show the batch being computed while the step runs, so a
		// client that got tokens of a step reads a state at least that new.
		l.metrics.gauges(l.engine)
		if r.Duration <= 0 {
			// Nothing could be scheduled (should not happen with work
			// queued); wait for a change rather than spin.
			due = time.Time{}
			select {
			case <-ctx.Done():
				return
			case <-l.kick:
			}
			continue
		}
		start, backToBack := now, !due.IsZero()
		if backToBack && due.Before(now) {
			start = due
			if floor := now.Add(-r.Duration / 2); start.Before(floor) {
				start = floor
			}
		}
		if backToBack {
			l.record(r.Duration, true, max(0, now.Sub(due)), max(0, start.Sub(due)))
		} else {
			l.record(r.Duration, false, 0, 0)
		}
		due = start.Add(r.Duration)
		t.Reset(due.Sub(now))
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		// Timestamp the tokens when they actually go out: on a busy machine
		// the timer fires late, and the ground truth must match what
		// clients can observe.
		l.publish(r, l.clk.Now())
	}
}

// publish hands a finished step's events to their streams.
func (l *loop) publish(r *sim.StepResult, end time.Time) {
	start := r.Start
	for _, ev := range r.Events {
		st, ok := l.live[ev.ID]
		if !ok {
			continue // aborted while the step ran
		}
		st.mu.Lock()
		if ev.Flags.Has(sim.EvFirstScheduled) {
			st.sched = start
			l.metrics.queueTime(start.Sub(st.arrival))
		}
		if ev.Flags.Has(sim.EvPreempted) {
			st.preempts++
		}
		if ev.Flags.Has(sim.EvToken) {
			st.output = int(ev.Output)
			if ev.Flags.Has(sim.EvFirstToken) {
				st.first = end
				l.metrics.ttft(end.Sub(st.arrival))
				l.metrics.prompt(st.spec.PromptTokens)
			} else {
				l.metrics.itl(end.Sub(st.lastTok))
			}
			st.lastTok = end
			l.metrics.tokens(1)
		}
		if ev.Flags.Has(sim.EvFinished) {
			st.finish, st.done = end, true
			l.metrics.finished(end.Sub(st.arrival))
			delete(l.live, ev.ID)
		}
		st.mu.Unlock()
		st.wake()
	}
}

func (l *loop) shutdown() {
	l.mu.Lock()
	l.closed = true
	in := l.inbox
	l.inbox, l.aborts = nil, nil
	l.mu.Unlock()
	for _, st := range in {
		l.live[st.id] = st
	}
	for id, st := range l.live {
		st.mu.Lock()
		if !st.done {
			st.err, st.done = errStopped, true
		}
		st.mu.Unlock()
		st.wake()
		delete(l.live, id)
	}
}
