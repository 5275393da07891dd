package proctest

// Runner is a process or goroutine a wait watches: the wait fails at once
// when it ends before the condition holds. *Proc and *Task are Runners.
type Runner interface {
	// Name is what failure messages call it.
	Name() string
	// Done is closed when it has ended.
	Done() <-chan struct{}
	// Err is how it ended; it is read only after Done is closed.
	Err() error
}

// ending is the part of a Proc or Task that says whether and how it has
// ended. Exactly one goroutine — the process's waiter, the task's runner —
// calls finish; everyone else only reads.
type ending struct {
	name string
	done chan struct{}
	err  error // written by finish before done is closed
}

func newEnding(name string) ending { return ending{name: name, done: make(chan struct{})} }

// finish records how it ended and wakes every waiter.
func (e *ending) finish(err error) {
	e.err = err
	close(e.done)
}

// Name is the name the test gave it.
func (e *ending) Name() string { return e.name }

// Done is closed when it has ended.
func (e *ending) Done() <-chan struct{} { return e.done }

// Err is how it ended — a process's exit error (nil for status 0), a
// task's returned error — or nil while it runs.
func (e *ending) Err() error {
	select {
	case <-e.done:
		return e.err
	default:
		return nil
	}
}

// Exited reports whether it has ended.
func (e *ending) Exited() bool {
	select {
	case <-e.done:
		return true
	default:
		return false
	}
}
