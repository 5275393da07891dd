package clock

import (
	"sort"
	"sync"
	"time"
)

// Fake is a clock for tests: time stands still until Advance or Set moves
// it, and timers whose deadline has been reached fire during that call.
// It is safe for concurrent use.
type Fake struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

var _ Clock = (*Fake)(nil)

// NewFake returns a fake clock reading start.
func NewFake(start time.Time) *Fake { return &Fake{now: start} }

func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *Fake) Since(t time.Time) time.Duration { return f.Now().Sub(t) }

func (f *Fake) NewTimer(d time.Duration) Timer {
	return f.add(d, nil)
}

func (f *Fake) AfterFunc(d time.Duration, fn func()) Timer {
	return f.add(d, fn)
}

func (f *Fake) add(d time.Duration, fn func()) *fakeTimer {
	t := &fakeTimer{f: f, fn: fn, c: make(chan time.Time, 1)}
	f.mu.Lock()
	t.when = f.now.Add(d)
	t.active = true
	f.timers = append(f.timers, t)
	f.mu.Unlock()
	if d <= 0 {
		f.Advance(0)
	}
	return t
}

// Timers reports how many timers are armed; tests use it to wait until the
// code under test is blocked on the clock.
func (f *Fake) Timers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, t := range f.timers {
		if t.active {
			n++
		}
	}
	return n
}

// Advance moves the clock forward by d, firing due timers in deadline order.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	f.now = f.now.Add(d)
	now := f.now
	var due []*fakeTimer
	keep := f.timers[:0]
	for _, t := range f.timers {
		switch {
		case !t.active:
		case !t.when.After(now):
			t.active = false
			due = append(due, t)
		default:
			keep = append(keep, t)
		}
	}
	f.timers = keep
	f.mu.Unlock()
	sort.SliceStable(due, func(i, j int) bool { return due[i].when.Before(due[j].when) })
	for _, t := range due {
		if t.fn != nil {
			go t.fn()
			continue
		}
		select {
		case t.c <- t.when:
		default:
		}
	}
}

// Set moves the clock to t (never backwards).
func (f *Fake) Set(t time.Time) {
	if d := t.Sub(f.Now()); d > 0 {
		f.Advance(d)
	}
}

type fakeTimer struct {
	f      *Fake
	fn     func()
	c      chan time.Time
	when   time.Time
	active bool
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

func (t *fakeTimer) Stop() bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	was := t.active
	t.active = false
	return was
}

func (t *fakeTimer) Reset(d time.Duration) bool {
	t.f.mu.Lock()
	was := t.active
	t.when = t.f.now.Add(d)
	t.active = true
	listed := false
	for _, o := range t.f.timers {
		listed = listed || o == t
	}
	if !listed {
		t.f.timers = append(t.f.timers, t)
	}
	t.f.mu.Unlock()
	if d <= 0 {
		t.f.Advance(0)
	}
	return was
}
