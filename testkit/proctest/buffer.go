package proctest

import (
	"bytes"
	"sync"
	"testing"
)

// Buffer is an output sink that a process or server writes while the test
// reads it. The zero value is ready to use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// ShowOnFailure shows what out holds, under name, when the test has
// failed by the time its cleanups run: the log of an in-process server or
// command, shown like a Proc's output.
func ShowOnFailure(t testing.TB, name string, out *Buffer) {
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("---- %s output ----\n%s", name, out.String())
		}
	})
}
