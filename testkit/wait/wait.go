// Package wait is the one way llmesh's tests wait for something to happen:
// poll a condition at a short interval until it holds, and fail the test
// after a generous deadline with what was awaited and the last reason it
// did not hold. Tests never sleep a fixed time instead. Only tests import
// it, and it imports nothing of llmesh, so any package's tests can.
package wait

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// DefaultTimeout bounds a wait that sets no Timeout. It only bounds
// failures — a wait returns as soon as its condition holds — so it is
// generous: tests run on loaded 2-core machines next to other test
// binaries.
const DefaultTimeout = 30 * time.Second

// DefaultInterval is the time between two checks of a Poll that sets no
// Interval. It is short, so a condition that holds only briefly is still
// seen; a condition that costs a network round trip may set a longer one.
const DefaultInterval = 2 * time.Millisecond

// Poll is how a wait polls; the zero value uses the defaults.
type Poll struct {
	// Timeout is how long the condition may take to hold; zero means
	// DefaultTimeout.
	Timeout time.Duration
	// Interval is the time between two checks; zero means
	// DefaultInterval.
	Interval time.Duration
}

// stopped marks a condition's error that ends a wait at once.
type stopped struct{ err error }

func (s stopped) Error() string { return s.err.Error() }
func (s stopped) Unwrap() error { return s.err }

// Stop wraps err so that the wait returning it gives up at once instead of
// polling on: for a condition that learns it can never hold (the process
// it waits for exited). Stop(nil) is nil.
func Stop(err error) error {
	if err == nil {
		return nil
	}
	return stopped{err}
}

// Check polls cond until it returns nil and returns nil then. It returns
// an error naming what and carrying cond's last error when the timeout
// passes ("gave up after 30s waiting for what (last: err)") or cond
// returns an error wrapped by Stop ("err while waiting for what"). Check does not touch a
// testing.T, so a goroutine other than the test's may call it.
func (p Poll) Check(what string, cond func() error) error {
	timeout, interval := p.Timeout, p.Interval
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	if interval <= 0 {
		interval = DefaultInterval
	}
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return nil
		}
		var s stopped
		if errors.As(err, &s) {
			return fmt.Errorf("%w while waiting for %s", s.err, what)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("gave up after %v waiting for %s (last: %w)", timeout, what, err)
		}
		time.Sleep(interval)
	}
}

// UntilNil polls cond until it returns nil; it fails the test as Check
// returns an error.
func (p Poll) UntilNil(t testing.TB, what string, cond func() error) {
	t.Helper()
	if err := p.Check(what, cond); err != nil {
		t.Fatal(err)
	}
}

// errNotYet is the last error of a boolean condition that never held.
var errNotYet = errors.New("condition not met")

// Until polls cond until it returns true; it fails the test, naming what,
// when the timeout passes first.
func (p Poll) Until(t testing.TB, what string, cond func() bool) {
	t.Helper()
	p.UntilNil(t, what, func() error {
		if cond() {
			return nil
		}
		return errNotYet
	})
}

// Until is Poll{}.Until: the default timeout and interval.
func Until(t testing.TB, what string, cond func() bool) {
	t.Helper()
	Poll{}.Until(t, what, cond)
}

// UntilNil is Poll{}.UntilNil: the default timeout and interval.
func UntilNil(t testing.TB, what string, cond func() error) {
	t.Helper()
	Poll{}.UntilNil(t, what, cond)
}
