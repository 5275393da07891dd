package server

import (
	"context"
	"testing"
	"time"

	"github.com/llmesh/llmesh/clock"
	"github.com/llmesh/llmesh/sim"
)

// lateClock is a fake clock whose timers fire late more after their
// deadline, like timers on a busy host.
type lateClock struct {
	*clock.Fake
	late time.Duration
}

func (c lateClock) NewTimer(d time.Duration) clock.Timer {
	return lateTimer{c.Fake.NewTimer(d + c.late), c.late}
}

type lateTimer struct {
	clock.Timer
	late time.Duration
}

func (t lateTimer) Reset(d time.Duration) bool { return t.Timer.Reset(d + t.late) }

// finishAfter runs one 16-token prompt with 40 output tokens through a loop
// on a fake clock whose timers fire late, and returns how long it took on
// that clock. The fake clock moves in 10 µs steps, and only while the loop
// waits on its timer.
func finishAfter(t *testing.T, late time.Duration) (time.Duration, Pace) {
	t.Helper()
	p, err := sim.LookupProfile(sim.DefaultProfile)
	if err != nil {
		t.Fatal(err)
	}
	eng, err := sim.NewEngine(p, sim.Config{})
	if err != nil {
		t.Fatal(err)
	}
	fake := clock.NewFake(time.Unix(1_700_000_000, 0))
	l := newLoop(lateClock{fake, late}, eng, newMetrics("m"))
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { defer close(stopped); l.run(ctx) }()
	defer func() { cancel(); <-stopped }()

	st := &stream{id: 1, arrival: fake.Now(), notify: make(chan struct{}, 1),
		spec: sim.SeqSpec{ID: 1, PromptTokens: 16, MaxTokens: 40}}
	if !l.submit(st) {
		t.Fatal("loop refused the stream")
	}
	deadline := time.Now().Add(30 * time.Second)
	for !st.snapshot().done {
		if time.Now().After(deadline) {
			t.Fatalf("stream not done after 30 s: %+v", st.snapshot())
		}
		if fake.Timers() == 0 {
			time.Sleep(20 * time.Microsecond)
			continue
		}
		fake.Advance(10 * time.Microsecond)
	}
	snap := st.snapshot()
	if snap.err != nil || snap.output != 40 {
		t.Fatalf("stream ended with %d tokens, err %v", snap.output, snap.err)
	}
	return snap.finish.Sub(st.arrival), l.snapshotPace()
}

// TestLoopKeepsModelPaceWhenTimersFireLate checks that late timer wake-ups
// do not add up over back-to-back steps: 40 steps (prefill + 39 decodes) with every timer 2 ms
// late finish at most one wake-up (plus the clock's granularity per step)
// after the same run with punctual timers, where timing each step from its
// late start would add 39 × 2 ms (the steps here take about 7 ms, so half
// a step covers the 2 ms).
func TestLoopKeepsModelPaceWhenTimersFireLate(t *testing.T) {
	const late = 2 * time.Millisecond
	punctual, _ := finishAfter(t, 0)
	delayed, pace := finishAfter(t, late)
	if extra := delayed - punctual; extra > late+40*10*time.Microsecond || extra < 0 {
		t.Fatalf("with timers %v late the stream took %v, on time %v: %v extra, want at most about one wake-up", late, delayed, punctual, extra)
	}
	// The loop's own account: every step after the first followed its
	// predecessor, each woke 2 ms (plus the fake clock's 10 µs steps)
	// late, and none of it was left uncredited.
	if pace.Steps != 40 || pace.BackToBack != pace.Steps-1 || pace.Drift != 0 ||
		pace.LateP50 < late || pace.LateP99 > late+100*time.Microsecond || pace.Modelled <= 0 {
		t.Fatalf("pace %+v, want %d steps, all but the first back to back, late by about %v, no drift", pace, 40, late)
	}
}

// TestLoopPaceDriftBeyondCredit checks that wake-ups later than half a step
// are reported as drift: with timers 50 ms late and steps of about 7 ms,
// each back-to-back step falls behind by the delay minus half a step.
func TestLoopPaceDriftBeyondCredit(t *testing.T) {
	const late = 50 * time.Millisecond
	_, pace := finishAfter(t, late)
	if pace.BackToBack == 0 {
		t.Fatalf("pace %+v: no back-to-back steps", pace)
	}
	perStep := pace.Drift / time.Duration(pace.BackToBack)
	if lo, hi := late-pace.Modelled/time.Duration(pace.Steps), late; perStep < lo || perStep > hi {
		t.Fatalf("drift per back-to-back step %v (pace %+v), want between %v and %v", perStep, pace, lo, hi)
	}
}
