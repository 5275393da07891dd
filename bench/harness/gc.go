package harness

import (
	"os"
	"runtime/debug"
)

// GCPercent is the garbage collector's target (as GOGC) that the bench
// commands run with. The harness allocates little per event but at
// thousands of requests per second the collector still ran several times a
// second, and its pauses and assists showed up as schedule lag: against
// the sim in the same process at 2,000 short SSE streams/s, p99 lag was
// 0.70–0.81 ms at 400 and 1.31–1.99 ms at the default 100 (three runs
// each, BenchmarkCapacitySim). The heap grows to about five times what
// the run keeps (mostly its records) instead of twice. `llmesh scheduler
// serve` and `scheduler bench` run with it too: their live heap is a few
// MiB and they allocate for every message, so at 100 they collected 10–26
// times a second at 40,000 admissions/s, and on two cores the
// decision latency's p99 was 0.69–0.86 ms at 100 and 0.29–0.31 ms at 400
// (framed sessions, service and client both; docs/results/scheduling.md).
const GCPercent = 400

// TuneGC sets the garbage collector's target to GCPercent unless the GOGC
// environment variable sets one, and returns the function that restores
// the previous target.
func TuneGC() (restore func()) {
	if os.Getenv("GOGC") != "" {
		return func() {}
	}
	old := debug.SetGCPercent(GCPercent)
	return func() { debug.SetGCPercent(old) }
}
