package main

import (
	"os"
	"runtime/debug"
	"testing"
)

func TestTuneGC(t *testing.T) {
	t.Run("GOGC unset", func(t *testing.T) {
		t.Setenv("GOGC", "") // restores the outer value afterwards
		os.Unsetenv("GOGC")
		before := debug.SetGCPercent(123)
		defer debug.SetGCPercent(before)
		restore := tuneGC()
		if got := debug.SetGCPercent(serviceGCPercent); got != serviceGCPercent {
			t.Fatalf("GC percent %d while tuned, want %d", got, serviceGCPercent)
		}
		restore()
		if got := debug.SetGCPercent(123); got != 123 {
			t.Fatalf("GC percent %d after restore, want 123", got)
		}
	})
	t.Run("GOGC set", func(t *testing.T) {
		t.Setenv("GOGC", "50")
		before := debug.SetGCPercent(77)
		defer debug.SetGCPercent(before)
		tuneGC()()
		if got := debug.SetGCPercent(77); got != 77 {
			t.Fatalf("GC percent %d with GOGC set, want the process's 77", got)
		}
	})
}
