//go:build !unix

package cputime

import "time"

// Without a CPU clock both read the wall clock: differences stay
// meaningful, if no longer free of the wait for a core.
func process() time.Duration { return time.Duration(time.Now().UnixNano()) }
func thread() time.Duration  { return time.Duration(time.Now().UnixNano()) }
