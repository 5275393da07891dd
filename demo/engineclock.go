package demo

import (
	"slices"
	"sync"
	"time"

	"github.com/llmesh/llmesh/clock"
)

// idleGap separates back-to-back engine steps from a step after an idle
// engine: the loop starts the next step within microseconds of the last
// one's end unless it waited for work.
const idleGap = 50 * time.Millisecond

// engineClock is the wall clock as the simulated engine's loop sees it,
// recording how its steps keep to the timing model. The loop computes a
// step, sleeps for the step's modelled duration on a timer from this clock,
// publishes the tokens and computes the next step; every delay between the
// timer's deadline and the next step's start (the timer firing late, the
// loop goroutine waiting for a CPU, the publishing itself) therefore
// lengthens the engine's real step beyond the model. In one process with
// the gateway and the load generator on few cores these delays are what
// separates the real-time demo from virtual time.
type engineClock struct {
	clock.Real

	mu       sync.Mutex
	deadline time.Time       // when the previous step's timer was due
	steps    int             // timers made: one per step
	model    time.Duration   // sum of the modelled step durations
	late     []time.Duration // per back-to-back step: start − previous deadline
	lateSum  time.Duration
}

// maxStep bounds a modelled step; a longer timer (the loop's idle timer,
// created once and stopped) is not a step.
const maxStep = time.Minute

// NewTimer and the returned timer's Reset each start a step of modelled
// duration d: the engine loop makes one timer per step or reuses one.
func (c *engineClock) NewTimer(d time.Duration) clock.Timer {
	c.step(d)
	return stepTimer{c.Real.NewTimer(d), c}
}

// step records a step of modelled duration d starting now.
func (c *engineClock) step(d time.Duration) {
	if d >= maxStep {
		return
	}
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.deadline.IsZero() {
		if late := now.Sub(c.deadline); late >= 0 && late < idleGap {
			c.late = append(c.late, late)
			c.lateSum += late
		}
	}
	c.deadline = now.Add(d)
	c.steps++
	c.model += d
}

// stepTimer is a wall-clock timer whose Reset starts a step.
type stepTimer struct {
	clock.Timer
	c *engineClock
}

func (t stepTimer) Reset(d time.Duration) bool {
	t.c.step(d)
	return t.Timer.Reset(d)
}

// EngineTiming is how the simulated engine of one run kept to its model.
type EngineTiming struct {
	// Steps is the number of engine steps; Model the sum of their
	// modelled durations.
	Steps int           `json:"steps"`
	Model time.Duration `json:"model_ns"`
	// BackToBack counts steps that started right after the previous one
	// (not after an idle engine); Overrun is the sum of their delays past
	// the previous step's modelled end, and OverrunP50/P99 the
	// distribution of one delay.
	BackToBack int           `json:"back_to_back"`
	Overrun    time.Duration `json:"overrun_ns"`
	OverrunP50 time.Duration `json:"overrun_p50_ns"`
	OverrunP99 time.Duration `json:"overrun_p99_ns"`
}

// Slowdown is the share of extra time the engine took for its back-to-back
// steps: overrun over modelled time (0 means it kept to the model).
func (t EngineTiming) Slowdown() float64 {
	if t.Model <= 0 {
		return 0
	}
	return float64(t.Overrun) / float64(t.Model)
}

func (c *engineClock) timing() EngineTiming {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := EngineTiming{Steps: c.steps, Model: c.model, BackToBack: len(c.late), Overrun: c.lateSum}
	if n := len(c.late); n > 0 {
		s := slices.Clone(c.late)
		slices.Sort(s)
		t.OverrunP50 = s[n/2]
		t.OverrunP99 = s[min(n-1, n*99/100)]
	}
	return t
}
