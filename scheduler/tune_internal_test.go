package scheduler

import (
	"testing"
	"time"
)

func TestDeriveReserve(t *testing.T) {
	for _, c := range []struct {
		lambda, mu float64
		limit      int
		want       int
	}{
		{0, 5, 64, 0},      // no urgent traffic seen
		{1, 0, 64, 0},      // no finishes seen
		{1.78, 8.9, 64, 1}, // the standard workload at load 1.0 (finishes of both classes): q ≈ 0.17
		{5.7, 11.4, 64, 2}, // a 50/50 mix: q = 1/3, (1/3)^3 ≤ 0.1
		{5.7, 5.7, 64, 3},  // q = 0.5, 0.5^4 ≤ 0.1
		{50, 1, 64, 8},     // at most an eighth of the limit
		{1, 1, 1, 0},       // a one-slot pool reserves nothing
	} {
		if got := deriveReserve(c.lambda, c.mu, c.limit); got != c.want {
			t.Errorf("deriveReserve(%v, %v, %d) = %d, want %d", c.lambda, c.mu, c.limit, got, c.want)
		}
	}
}

func TestDerivePrefillCapAndBudget(t *testing.T) {
	if got := derivePrefillCap(500*time.Millisecond, 31*time.Microsecond); got != 1612 {
		t.Errorf("cap = %d, want 1612", got)
	}
	if got := derivePrefillCap(500*time.Millisecond, time.Second); got != minPrefillCap {
		t.Errorf("slow engine: cap %d, want the minimum", got)
	}
	if got := derivePrefillCap(0, time.Microsecond); got != 0 {
		t.Errorf("no objective: cap %d", got)
	}
	if got := deriveBudget(500*time.Millisecond, 60*time.Millisecond); got != 250*time.Millisecond {
		t.Errorf("budget = %v, want half the objective", got)
	}
	if got := deriveBudget(500*time.Millisecond, 200*time.Millisecond); got != 400*time.Millisecond {
		t.Errorf("budget = %v, want twice the prefill", got)
	}
	if got := deriveBudget(500*time.Millisecond, time.Second); got != 500*time.Millisecond {
		t.Errorf("budget = %v, want the objective", got)
	}
}
