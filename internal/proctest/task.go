package proctest

import (
	"context"
	"testing"
)

// Task is a function — typically a server's Serve or a command's Main —
// run in its own goroutine for the length of a test.
type Task struct {
	name    string
	cancel  context.CancelFunc
	done    chan struct{}
	err     error // set by the task's goroutine before done is closed
	stopped bool  // Stop was called; only the test's goroutine touches it
}

var _ Runner = (*Task)(nil)

// Go runs fn in a new goroutine until it returns or the test ends. fn must
// return once its ctx is cancelled. Unless the test called Stop itself, the
// cleanup cancels ctx, waits for fn and fails the test when fn returned an
// error.
func Go(t testing.TB, name string, fn func(ctx context.Context) error) *Task {
	ctx, cancel := context.WithCancel(context.Background())
	r := &Task{name: name, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.err = fn(ctx)
	}()
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

// Name is the name the test gave the task.
func (r *Task) Name() string { return r.name }

// Done is closed when fn has returned.
func (r *Task) Done() <-chan struct{} { return r.done }

// Err is what fn returned, or nil while it runs.
func (r *Task) Err() error {
	select {
	case <-r.done:
		return r.err
	default:
		return nil
	}
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
