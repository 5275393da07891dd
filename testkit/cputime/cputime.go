// Package cputime reads the CPU clocks that llmesh's benchmarks report
// instead of wall time: on a shared, oversubscribed machine wall-clock
// ns/op includes time spent waiting for a core, CPU time does not. Only
// tests import it.
package cputime

import (
	"runtime"
	"testing"
	"time"
)

// Process is the user+system CPU time the whole process has used: every
// goroutine's, a loopback client's and server's together.
func Process() time.Duration { return process() }

// Thread is the calling thread's CPU time; the caller locks its goroutine
// to its thread (runtime.LockOSThread) around the two reads it subtracts.
// Where no thread CPU clock is at hand it is the wall clock.
func Thread() time.Duration { return thread() }

// ReportThread pins the benchmark's goroutine to its thread and, when the
// benchmark ends, reports that thread's CPU time per op as "cpu-ns/op".
func ReportThread(b *testing.B) {
	runtime.LockOSThread()
	start := Thread()
	b.Cleanup(func() {
		if b.N > 0 {
			b.ReportMetric(float64(Thread()-start)/float64(b.N), "cpu-ns/op")
		}
		runtime.UnlockOSThread()
	})
}

// ReportProcess reports, when the benchmark ends, the process's CPU time
// per op as "cpu-ns/op": the cost of everything the process ran meanwhile,
// so an upper bound for the code under test when a client shares it.
func ReportProcess(b *testing.B) {
	start := Process()
	b.Cleanup(func() {
		if b.N > 0 {
			b.ReportMetric(float64(Process()-start)/float64(b.N), "cpu-ns/op")
		}
	})
}
