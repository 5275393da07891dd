package wait_test

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmesh/llmesh/testkit/wait"
)

// recorder is a testing.TB whose Fatal records the failure instead of
// ending the goroutine, so a test can look at how a wait failed.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatal(args ...any) {
	r.failed = fmt.Sprint(args...)
}

func TestUntilReturnsOnceTheConditionHolds(t *testing.T) {
	var n atomic.Int32
	r := &recorder{TB: t}
	wait.Until(r, "three checks", func() bool { return n.Add(1) >= 3 })
	if r.failed != "" {
		t.Fatalf("failed: %s", r.failed)
	}
	if got := n.Load(); got != 3 {
		t.Fatalf("condition checked %d times, want 3 (no check after it held)", got)
	}
}

func TestUntilFailsNamingWhatAfterTheTimeout(t *testing.T) {
	r := &recorder{TB: t}
	wait.Poll{Timeout: 20 * time.Millisecond}.Until(r, "the moon", func() bool { return false })
	for _, want := range []string{"gave up after 20ms", "waiting for the moon", "condition not met"} {
		if !strings.Contains(r.failed, want) {
			t.Errorf("failure %q lacks %q", r.failed, want)
		}
	}
}

func TestUntilNilReportsTheLastError(t *testing.T) {
	var n atomic.Int32
	r := &recorder{TB: t}
	wait.Poll{Timeout: 20 * time.Millisecond, Interval: time.Millisecond}.UntilNil(r, "a reply", func() error {
		return fmt.Errorf("attempt %d refused", n.Add(1))
	})
	last := fmt.Sprintf("attempt %d refused", n.Load())
	if !strings.Contains(r.failed, "waiting for a reply") || !strings.Contains(r.failed, "(last: "+last+")") {
		t.Fatalf("failure %q does not name the wait and its last error %q", r.failed, last)
	}
	if n.Load() < 2 {
		t.Fatalf("condition checked %d times within the timeout, want it polled", n.Load())
	}
}

func TestStopEndsTheWaitAtOnce(t *testing.T) {
	var n atomic.Int32
	exited := errors.New("server exited: status 1")
	err := wait.Poll{Timeout: time.Hour}.Check("the server", func() error {
		if n.Add(1) == 2 {
			return wait.Stop(exited)
		}
		return errors.New("no answer")
	})
	if !errors.Is(err, exited) || err.Error() != "server exited: status 1 while waiting for the server" {
		t.Fatalf("Check = %v, want the stop cause naming the wait", err)
	}
	if n.Load() != 2 {
		t.Fatalf("condition checked %d times, want 2 (none after Stop)", n.Load())
	}
	if wait.Stop(nil) != nil {
		t.Fatal("Stop(nil) is not nil")
	}
}

func TestCheckFromAnotherGoroutine(t *testing.T) {
	ready := make(chan struct{})
	go func() { close(ready) }()
	done := make(chan error, 1)
	go func() {
		done <- wait.Poll{}.Check("the channel closed", func() error {
			select {
			case <-ready:
				return nil
			default:
				return errors.New("open")
			}
		})
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
