//go:build !linux

package runner

import (
	"runtime"
	"time"
)

// preciseSleep yields until d has passed (no nanosleep here).
func preciseSleep(d time.Duration) {
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		runtime.Gosched()
	}
}
