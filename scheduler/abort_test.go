package scheduler_test

import (
	"testing"

	"github.com/llmesh/llmesh/scheduler"
)

// TestAbortUnhonoured preempts one batch request for an interactive one,
// then feeds the engine load reports an engine that keeps the victim
// running (5 held for 4 of llmesh's) or drops it (4 held) would send. The
// first marks the pool after three reports over at least a second, and
// a second interactive arrival preempts nothing; the second leaves it
// unmarked and the second arrival preempts again.
func TestAbortUnhonoured(t *testing.T) {
	for _, tc := range []struct {
		name       string
		engineHeld int // running + waiting the engine reports after the release
		wantMarked bool
	}{
		{"keeps running", 5, true},
		{"released", 4, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMachine(t, preemptivePool(4, rails))
			fillBatch(t, m, 4)
			observe := func(ms, running, waiting int) bool {
				t.Helper()
				marked, err := m.ObserveEndpointLoad(at(ms), "p", "", scheduler.EndpointLoad{Running: running, Waiting: waiting})
				if err != nil {
					t.Fatal(err)
				}
				return marked
			}
			observe(5, 4, 0)
			arrive(t, m, at(20), scheduler.Request{Class: "interactive", MaxTokens: 10})
			d := m.Step(at(20))
			if len(d.Preempted) != 1 {
				t.Fatalf("preempted %v, want one victim", d.Preempted)
			}
			victim := d.Preempted[0]
			m.Finish(at(30), victim, scheduler.Preempted)
			if d = m.Step(at(30)); len(d.Admitted) != 1 {
				t.Fatalf("admitted %v after the release, want the interactive request", d.Admitted)
			}
			// Reports every 400ms: three reports above the baseline, but
			// the third only 1170ms after the release, so the third marks.
			var markedAt []int
			for _, ms := range []int{400, 800, 1200, 1600} {
				if observe(ms, tc.engineHeld-1, 1) {
					markedAt = append(markedAt, ms)
				}
			}
			if got := m.AbortUnhonoured("p"); got != tc.wantMarked {
				t.Fatalf("AbortUnhonoured = %v, want %v", got, tc.wantMarked)
			}
			if tc.wantMarked && (len(markedAt) != 1 || markedAt[0] != 1200) {
				t.Fatalf("marked at reports %v, want once at 1200ms", markedAt)
			}
			if st := m.Stats()[0]; st.AbortUnhonoured != tc.wantMarked {
				t.Fatalf("Stats().AbortUnhonoured = %v, want %v", st.AbortUnhonoured, tc.wantMarked)
			}
			arrive(t, m, at(2000), scheduler.Request{Class: "interactive", MaxTokens: 10})
			d = m.Step(at(2000))
			if tc.wantMarked && len(d.Preempted) != 0 {
				t.Fatalf("marked pool preempted %v", d.Preempted)
			}
			if !tc.wantMarked && len(d.Preempted) != 1 {
				t.Fatalf("unmarked pool preempted %v, want one victim", d.Preempted)
			}
		})
	}
}

// TestAbortWatchNeedsGrace: three reports above the baseline within less
// than the grace time after the release do not mark the pool; three
// reports at the baseline in a row end the watch.
func TestAbortWatchNeedsGrace(t *testing.T) {
	m := newMachine(t, preemptivePool(4, rails))
	fillBatch(t, m, 4)
	obs := func(ms, running int) {
		t.Helper()
		if _, err := m.ObserveEndpointLoad(at(ms), "p", "", scheduler.EndpointLoad{Running: running}); err != nil {
			t.Fatal(err)
		}
	}
	obs(5, 4)
	arrive(t, m, at(20), scheduler.Request{Class: "interactive", MaxTokens: 10})
	d := m.Step(at(20))
	m.Finish(at(30), d.Preempted[0], scheduler.Preempted)
	m.Step(at(30))
	obs(100, 5)
	obs(200, 5)
	obs(300, 5)
	if m.AbortUnhonoured("p") {
		t.Fatal("marked within the grace time")
	}
	obs(400, 4) // released: three reports in a row end the watch
	obs(450, 4)
	obs(500, 4)
	obs(1500, 5)
	obs(1600, 5)
	obs(1700, 5)
	if m.AbortUnhonoured("p") {
		t.Fatal("marked without a preemption being watched")
	}
	if _, err := m.ObserveEndpointLoad(at(1800), "nope", "", scheduler.EndpointLoad{}); err == nil {
		t.Fatal("unknown pool accepted")
	}
}

// TestAbortWatchOneLowReport: a single report at the baseline between
// reports above it is the lag between the engine's scrape and llmesh's
// in-flight count (a request admitted here that has not reached the
// engine yet), not the engine letting go of the victim: the watch goes
// on and marks the pool once three reports in a row are above the
// baseline, the last a second after the release. Two low reports in a
// row do not end it either.
func TestAbortWatchOneLowReport(t *testing.T) {
	m := newMachine(t, preemptivePool(4, rails))
	fillBatch(t, m, 4)
	obs := func(ms, running int) bool {
		t.Helper()
		marked, err := m.ObserveEndpointLoad(at(ms), "p", "", scheduler.EndpointLoad{Running: running})
		if err != nil {
			t.Fatal(err)
		}
		return marked
	}
	obs(5, 4)
	arrive(t, m, at(20), scheduler.Request{Class: "interactive", MaxTokens: 10})
	d := m.Step(at(20))
	m.Finish(at(30), d.Preempted[0], scheduler.Preempted)
	m.Step(at(30))
	// 48ms after the release: scraped before the urgent request reached
	// the engine, which holds the victim and three others, as many as
	// llmesh has in flight.
	for _, r := range []struct{ ms, running int }{{78, 4}, {300, 5}, {600, 4}, {650, 4}, {900, 5}, {1100, 5}} {
		if obs(r.ms, r.running) {
			t.Fatalf("marked at %dms, before three reports in a row above the baseline", r.ms)
		}
	}
	if !obs(1300, 5) {
		t.Fatal("not marked by the third report in a row above the baseline, 1.27s after the release")
	}
}
