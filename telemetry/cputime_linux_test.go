//go:build linux

package telemetry

import (
	"time"

	"golang.org/x/sys/unix"
)

// threadCPU is the calling thread's CPU time (the caller locks itself to
// its thread): on a shared, oversubscribed machine wall-clock ns/op
// includes time spent waiting for a core, CPU time does not.
func threadCPU() time.Duration {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
	return time.Duration(ts.Nano())
}
