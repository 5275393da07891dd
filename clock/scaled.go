package clock

import "time"

// Scaled runs Factor times faster than the wall clock: one real second is
// Factor seconds of this clock. Its Now starts at the real time of creation.
// A factor of 0 or less means 1.
type Scaled struct {
	origin time.Time
	factor float64
}

var _ Clock = (*Scaled)(nil)

// NewScaled returns a clock running factor times faster than real time.
func NewScaled(factor float64) *Scaled {
	if factor <= 0 {
		factor = 1
	}
	return &Scaled{origin: time.Now(), factor: factor}
}

// Factor is the speed-up over real time.
func (s *Scaled) Factor() float64 { return s.factor }

func (s *Scaled) Now() time.Time {
	real := time.Since(s.origin)
	return s.origin.Add(time.Duration(float64(real) * s.factor))
}

func (s *Scaled) Since(t time.Time) time.Duration { return s.Now().Sub(t) }

// Real converts a duration of this clock into wall-clock time.
func (s *Scaled) Real(d time.Duration) time.Duration {
	return time.Duration(float64(d) / s.factor)
}

func (s *Scaled) NewTimer(d time.Duration) Timer {
	return &scaledTimer{s: s, t: time.NewTimer(s.Real(d))}
}

func (s *Scaled) AfterFunc(d time.Duration, f func()) Timer {
	return &scaledTimer{s: s, t: time.AfterFunc(s.Real(d), f)}
}

type scaledTimer struct {
	s *Scaled
	t *time.Timer
}

func (t *scaledTimer) C() <-chan time.Time        { return t.t.C }
func (t *scaledTimer) Stop() bool                 { return t.t.Stop() }
func (t *scaledTimer) Reset(d time.Duration) bool { return t.t.Reset(t.s.Real(d)) }
