package scheduler_test

import (
	"testing"
	"time"

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
				change, err := m.ObserveEndpointLoad(at(ms), "p", "", scheduler.EndpointLoad{Running: running, Waiting: waiting})
				if err != nil {
					t.Fatal(err)
				}
				return change == scheduler.AbortMarked
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
		change, err := m.ObserveEndpointLoad(at(ms), "p", "", scheduler.EndpointLoad{Running: running})
		if err != nil {
			t.Fatal(err)
		}
		return change == scheduler.AbortMarked
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

// TestAbortProbe: a marked pool with AbortProbe 10s preempts nothing for
// 10s, then exactly one probe victim although two urgent requests wait.
// The engine keeps that one too: the pool stays marked and the next probe
// is 20s later. The engine stops the second probe's victim: the mark is
// lifted and the pool preempts as before, two victims for two urgent
// requests.
func TestAbortProbe(t *testing.T) {
	pc := preemptivePool(4, rails)
	pc.Preemption.AbortProbe = 10 * time.Second
	// No derived reserve: the urgent finishes below would hold a slot of
	// the four back from the batch refill the test counts on.
	pc.StaticBounds = true
	m := newMachine(t, pc)
	fillBatch(t, m, 4)
	observe := func(ms, held int) scheduler.AbortChange {
		t.Helper()
		c, err := m.ObserveEndpointLoad(at(ms), "p", "", scheduler.EndpointLoad{Running: held})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	// release finishes every victim of d at ms and steps.
	release := func(ms int, d scheduler.Decisions) scheduler.Decisions {
		t.Helper()
		for _, v := range d.Preempted {
			m.Finish(at(ms), v, scheduler.Preempted)
		}
		return m.Step(at(ms))
	}
	// urgent admits-and-finishes nothing: it queues two interactive
	// requests at ms and steps.
	urgent := func(ms int) scheduler.Decisions {
		t.Helper()
		for i := 0; i < 2; i++ {
			arrive(t, m, at(ms), scheduler.Request{Class: "interactive", MaxTokens: 10})
		}
		return m.Step(at(ms))
	}
	observe(5, 4)
	d := urgent(20)
	if len(d.Preempted) != 2 {
		t.Fatalf("preempted %d, want 2", len(d.Preempted))
	}
	d = release(30, d)
	// Both urgent requests run; the engine still holds both victims.
	var change scheduler.AbortChange
	for _, ms := range []int{400, 800, 1200} {
		change = observe(ms, 6)
	}
	if change != scheduler.AbortMarked {
		t.Fatalf("third report: %v, want AbortMarked", change)
	}
	if at0, ok := m.NextAbortProbe("p"); !ok || !at0.Equal(at(11200)) {
		t.Fatalf("NextAbortProbe = %v %v, want %v", at0, ok, at(11200))
	}
	// The urgent requests finish, two more batch requests take their
	// slots, then two more urgent requests wait.
	for _, tk := range d.Admitted {
		m.Finish(at(2000), tk, scheduler.Done)
	}
	for _, id := range []string{"e", "f"} {
		arrive(t, m, at(2000), scheduler.Request{ID: id, Class: "batch", MaxTokens: 100})
	}
	if d = m.Step(at(2000)); len(d.Admitted) != 2 {
		t.Fatalf("batch refill: admitted %v, want both", d.Admitted)
	}
	observe(2100, 6)
	d = urgent(3000)
	if len(d.Preempted) != 0 {
		t.Fatalf("marked pool preempted %v before the probe", d.Preempted)
	}
	if !d.Wake.Equal(at(11200)) {
		t.Fatalf("Wake = %v, want the probe at %v", d.Wake, at(11200))
	}
	if d = m.Step(at(11200)); len(d.Preempted) != 1 {
		t.Fatalf("probe preempted %d victims, want 1", len(d.Preempted))
	}
	if d2 := m.Step(at(11300)); len(d2.Preempted) != 0 {
		t.Fatalf("preempted %v while the probe was being watched", d2.Preempted)
	}
	d = release(11300, d)
	if _, ok := m.NextAbortProbe("p"); ok {
		t.Fatal("a next probe is scheduled while the probe is watched")
	}
	base := 6 // what the engine held at the last report before the release
	for _, ms := range []int{11600, 12000} {
		if c := observe(ms, base+1); c != scheduler.AbortNoChange {
			t.Fatalf("report at %dms: %v", ms, c)
		}
	}
	if c := observe(12400, base+1); c != scheduler.AbortProbeFailed {
		t.Fatalf("probe kept running: %v, want AbortProbeFailed", c)
	}
	if !m.AbortUnhonoured("p") {
		t.Fatal("unmarked after a failed probe")
	}
	if at1, ok := m.NextAbortProbe("p"); !ok || !at1.Equal(at(32400)) {
		t.Fatalf("after a failed probe NextAbortProbe = %v %v, want %v (twice the wait)", at1, ok, at(32400))
	}
	if d = m.Step(at(30000)); len(d.Preempted) != 0 {
		t.Fatalf("preempted %v before the second probe", d.Preempted)
	}
	observe(32000, 7)
	if d = m.Step(at(32400)); len(d.Preempted) != 1 {
		t.Fatalf("second probe preempted %d victims, want 1", len(d.Preempted))
	}
	release(32500, d)
	for _, ms := range []int{32600, 32700} {
		if c := observe(ms, 7); c != scheduler.AbortNoChange {
			t.Fatalf("report at %dms: %v", ms, c)
		}
	}
	if c := observe(32800, 7); c != scheduler.AbortUnmarked {
		t.Fatalf("probe stopped: %v, want AbortUnmarked", c)
	}
	if m.AbortUnhonoured("p") || m.Stats()[0].AbortUnhonoured {
		t.Fatal("still marked after an honoured probe")
	}
}
