package clock

import (
	"sync/atomic"
	"testing"
	"time"
)

func TestFakeTimersFireInOrderWhenAdvanced(t *testing.T) {
	start := time.Unix(1000, 0)
	f := NewFake(start)
	a := f.NewTimer(2 * time.Second)
	b := f.NewTimer(time.Second)
	if n := f.Timers(); n != 2 {
		t.Fatalf("Timers() = %d, want 2", n)
	}
	f.Advance(1500 * time.Millisecond)
	select {
	case at := <-b.C():
		if !at.Equal(start.Add(time.Second)) {
			t.Errorf("b fired at %v, want %v", at, start.Add(time.Second))
		}
	default:
		t.Fatal("b did not fire after its deadline")
	}
	select {
	case <-a.C():
		t.Fatal("a fired before its deadline")
	default:
	}
	f.Advance(time.Second)
	select {
	case <-a.C():
	default:
		t.Fatal("a did not fire after its deadline")
	}
	if got := f.Since(start); got != 2500*time.Millisecond {
		t.Errorf("Since = %v, want 2.5s", got)
	}
}

func TestFakeStopAndReset(t *testing.T) {
	f := NewFake(time.Unix(0, 0))
	tm := f.NewTimer(time.Second)
	if !tm.Stop() {
		t.Fatal("Stop of an armed timer reported false")
	}
	if tm.Stop() {
		t.Fatal("second Stop reported true")
	}
	f.Advance(2 * time.Second)
	select {
	case <-tm.C():
		t.Fatal("stopped timer fired")
	default:
	}
	if tm.Reset(time.Second) {
		t.Fatal("Reset of a stopped timer reported it was active")
	}
	if n := f.Timers(); n != 1 {
		t.Fatalf("Timers() after Reset = %d, want 1 (no duplicate entry)", n)
	}
	f.Advance(time.Second)
	select {
	case <-tm.C():
	default:
		t.Fatal("reset timer did not fire")
	}
	select {
	case <-tm.C():
		t.Fatal("reset timer fired twice")
	default:
	}
}

func TestFakeAfterFunc(t *testing.T) {
	f := NewFake(time.Unix(0, 0))
	var fired atomic.Int32
	done := make(chan struct{})
	f.AfterFunc(time.Second, func() { fired.Add(1); close(done) })
	f.Advance(999 * time.Millisecond)
	if fired.Load() != 0 {
		t.Fatal("fired early")
	}
	f.Set(time.Unix(1, 0))
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("AfterFunc did not run")
	}
}

func TestScaledRunsFaster(t *testing.T) {
	s := NewScaled(1000)
	t0 := s.Now()
	time.Sleep(5 * time.Millisecond)
	if d := s.Since(t0); d < 5*time.Second {
		t.Errorf("5 ms of real time read as %v on a 1000× clock, want ≥ 5s", d)
	}
	if got := s.Real(time.Second); got != time.Millisecond {
		t.Errorf("Real(1s) = %v, want 1ms", got)
	}
	tm := s.NewTimer(100 * time.Millisecond) // 0.1 ms of real time
	select {
	case <-tm.C():
	case <-time.After(5 * time.Second):
		t.Fatal("scaled timer did not fire")
	}
	if NewScaled(0).Factor() != 1 {
		t.Error("a factor of 0 should mean 1")
	}
}
