package main

import (
	"os"
	"runtime/debug"
)

// serviceGCPercent is the Go GC target `scheduler serve` and `scheduler
// bench` run with unless the GOGC environment variable says otherwise. Both
// keep a live heap of a few MiB and allocate for every message, so at the
// runtime's default of 100 they collect about fifteen times a second at
// 40,000 admissions/s, and requests that meet a collection's mark phase on
// two cores make the decision latency's p99 (docs/results/scheduling.md:
// p99 0.69–0.86 ms at 100, 0.29–0.31 ms at 400, same host and build). The
// heap goal grows from about 2× to 5× the live heap: tens of MiB.
const serviceGCPercent = 400

// tuneGC sets serviceGCPercent when GOGC is unset and returns the function
// that restores the previous setting (Main also runs inside tests).
func tuneGC() (restore func()) {
	if _, set := os.LookupEnv("GOGC"); set {
		return func() {}
	}
	old := debug.SetGCPercent(serviceGCPercent)
	return func() { debug.SetGCPercent(old) }
}
