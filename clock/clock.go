// Package clock is the time source that everything which waits or measures
// takes as a dependency, so that the same code runs in real time (hosts), in
// scaled time (the simulated engine's --time-scale) and in tests with a fake
// clock that only moves when told to.
package clock

import "time"

// Clock tells the time and makes timers.
type Clock interface {
	Now() time.Time
	// Since is Now().Sub(t).
	Since(t time.Time) time.Duration
	// NewTimer fires once after d of this clock's time.
	NewTimer(d time.Duration) Timer
	// AfterFunc calls f in its own goroutine after d of this clock's time.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is the part of *time.Timer that callers use.
type Timer interface {
	C() <-chan time.Time
	// Stop reports whether it stopped the timer before it fired.
	Stop() bool
	Reset(d time.Duration) bool
}

// Real is the wall clock.
type Real struct{}

var _ Clock = Real{}

func (Real) Now() time.Time                  { return time.Now() }
func (Real) Since(t time.Time) time.Duration { return time.Since(t) }
func (Real) NewTimer(d time.Duration) Timer  { return realTimer{time.NewTimer(d)} }
func (Real) AfterFunc(d time.Duration, f func()) Timer {
	return realTimer{time.AfterFunc(d, f)}
}

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time        { return r.t.C }
func (r realTimer) Stop() bool                 { return r.t.Stop() }
func (r realTimer) Reset(d time.Duration) bool { return r.t.Reset(d) }
