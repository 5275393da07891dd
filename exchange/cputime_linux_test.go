//go:build linux

package exchange

import (
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// threadCPU is the calling thread's user+system CPU time in ns.
func threadCPU() int64 {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_THREAD, &ru) != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// reportCPU pins the benchmark goroutine to its thread and, when the
// benchmark ends, reports the thread's CPU time per op as "cpu-ns/op": on a
// shared, oversubscribed machine wall-clock ns/op includes time spent
// waiting for a core, CPU time does not.
func reportCPU(b *testing.B) {
	runtime.LockOSThread()
	start := threadCPU()
	b.Cleanup(func() {
		if b.N > 0 {
			b.ReportMetric(float64(threadCPU()-start)/float64(b.N), "cpu-ns/op")
		}
		runtime.UnlockOSThread()
	})
}
