package cputime_test

import (
	"runtime"
	"testing"
	"time"

	"github.com/llmesh/llmesh/testkit/cputime"
)

// spin burns CPU on the calling thread until its own clock has advanced
// by d, so the test holds however loaded the machine is; a clock that
// does not advance ends it after a minute of wall time instead.
func spin(d time.Duration) (x uint64) {
	start, wall := cputime.Thread(), time.Now()
	for cputime.Thread()-start < d && time.Since(wall) < time.Minute {
		for i := range 1000 {
			x += uint64(i) * x
		}
	}
	return x
}

func TestClocksAdvanceWithWork(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	t0, p0 := cputime.Thread(), cputime.Process()
	spin(20 * time.Millisecond)
	dt, dp := cputime.Thread()-t0, cputime.Process()-p0
	if dt < 20*time.Millisecond {
		t.Fatalf("thread clock advanced %v over 20ms of work", dt)
	}
	// The process clock counts the same work (getrusage is at least as
	// coarse as a scheduler tick, so allow for one).
	if dp < dt-10*time.Millisecond {
		t.Fatalf("process clock advanced %v, less than the thread's %v", dp, dt)
	}
}

func TestThreadClockIgnoresSleep(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("thread CPU clock only on Linux")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	t0 := cputime.Thread()
	time.Sleep(50 * time.Millisecond)
	if d := cputime.Thread() - t0; d >= 50*time.Millisecond {
		t.Fatalf("thread clock advanced %v while the thread slept 50ms", d)
	}
}

func BenchmarkReportProcess(b *testing.B) {
	cputime.ReportProcess(b)
	for b.Loop() {
		spin(time.Microsecond)
	}
}

func BenchmarkReportThread(b *testing.B) {
	cputime.ReportThread(b)
	for b.Loop() {
		spin(time.Microsecond)
	}
}
