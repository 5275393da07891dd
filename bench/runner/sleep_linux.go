package runner

import (
	"syscall"
	"time"
)

// preciseSleep blocks the calling thread in nanosleep, which wakes within
// tens of microseconds; Go timers can be up to about a millisecond late.
// The runtime hands the goroutine's P to others while it sleeps.
func preciseSleep(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	_ = syscall.Nanosleep(&ts, nil)
}
