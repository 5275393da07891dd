package proctest

import (
	"context"
	"testing"
)

// Task is a function — typically a server's Serve or a command's Main —
// run in its own goroutine for the length of a test.
type Task struct {
	ending  // Name, Done, Err, Exited: what fn returned
	cancel  context.CancelFunc
	stopped bool // Stop was called; only the test's goroutine touches it
}

var _ Runner = (*Task)(nil)

// Go runs fn in a new goroutine until it returns or the test ends. fn must
// return once its ctx is cancelled. Unless the test called Stop itself, the
// cleanup cancels ctx, waits for fn and fails the test when fn returned an
// error.
func Go(t testing.TB, name string, fn func(ctx context.Context) error) *Task {
	ctx, cancel := context.WithCancel(context.Background())
	r := &Task{ending: newEnding(name), cancel: cancel}
	go func() { r.finish(fn(ctx)) }()
	t.Cleanup(func() {
		if r.stopped {
			return // the test took the error from Stop
		}
		if err := r.Stop(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	})
	return r
}

// Stop cancels fn's context, waits for fn to return and returns its error;
// the caller then owns that error (the cleanup no longer reports it).
// Later calls return the same error. Call it from the test's goroutine.
func (r *Task) Stop() error {
	r.stopped = true
	r.cancel()
	<-r.done
	return r.err
}
