package harness

import (
	"runtime/debug"
	"testing"
)

func TestTuneGC(t *testing.T) {
	prev := debug.SetGCPercent(100)
	defer debug.SetGCPercent(prev)

	t.Setenv("GOGC", "")
	restore := TuneGC()
	if got := debug.SetGCPercent(GCPercent); got != GCPercent {
		t.Errorf("GC percent %d after TuneGC, want %d", got, GCPercent)
	}
	restore()
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("GC percent %d after restore, want 100", got)
	}

	// GOGC from the environment wins.
	t.Setenv("GOGC", "50")
	restore = TuneGC()
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("GC percent %d with GOGC set, want it untouched (100)", got)
	}
	restore()
}
