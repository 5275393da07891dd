package scheduler_test

import (
	"strings"
	"testing"
	"time"

	"github.com/llmesh/llmesh/scheduler"
)

// admitBatch admits one batch request at now and returns its ticket and
// endpoint.
func admitBatch(t *testing.T, m *scheduler.Machine, now time.Time) (scheduler.Ticket, string) {
	t.Helper()
	tk := arrive(t, m, now, scheduler.Request{Class: "batch", MaxTokens: 10})
	d := m.Step(now)
	if len(d.Admitted) != 1 || d.Admitted[0] != tk {
		t.Fatalf("at %v admitted %v, want ticket %d", now.Sub(t0), d.Admitted, tk)
	}
	return tk, endpointOf(t, m, tk)
}

// admitOn admits requests at now until one lands on ep, finishing the
// others as done; it returns that request's ticket.
func admitOn(t *testing.T, m *scheduler.Machine, now time.Time, ep string) scheduler.Ticket {
	t.Helper()
	for i := 0; i < 4; i++ {
		tk, got := admitBatch(t, m, now)
		if got == ep {
			return tk
		}
		m.Finish(now, tk, scheduler.Done)
	}
	t.Fatalf("no request admitted on %s at %v", ep, now.Sub(t0))
	return 0
}

func ejected(m *scheduler.Machine, ep string) bool {
	for _, e := range m.Stats()[0].Endpoints {
		if e.Name == ep {
			return e.Ejected
		}
	}
	return false
}

// onlyOn admits n requests at now, checks they all go to ep, and finishes
// them as done.
func onlyOn(t *testing.T, m *scheduler.Machine, now time.Time, ep string, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		tk, got := admitBatch(t, m, now)
		if got != ep {
			t.Fatalf("at %v request %d went to %s, want only %s", now.Sub(t0), i, got, ep)
		}
		m.Finish(now, tk, scheduler.Done)
	}
}

func TestUnreachableEjectsAtOnceAndDoubles(t *testing.T) {
	pc := endpointPool(4, 4)
	pc.Ejection = scheduler.Ejection{Base: time.Second, Max: 3 * time.Second}
	m := newMachine(t, pc)
	tk := admitOn(t, m, at(0), "a:1")
	m.Finish(at(0), tk, scheduler.Unreachable)
	if !ejected(m, "a:1") {
		t.Fatal("a:1 not ejected after one unreachable outcome")
	}
	// Idle, a would score best; ejected, it gets nothing for Base.
	onlyOn(t, m, at(10), "b:1", 6)
	onlyOn(t, m, at(999), "b:1", 2)
	// Base over: a takes requests again; failing again doubles (2 s).
	tk = admitOn(t, m, at(1000), "a:1")
	m.Finish(at(1000), tk, scheduler.Unreachable)
	onlyOn(t, m, at(2999), "b:1", 3)
	tk = admitOn(t, m, at(3000), "a:1")
	// Doubling stops at Max (4 s would be next).
	m.Finish(at(3000), tk, scheduler.Unreachable)
	onlyOn(t, m, at(5999), "b:1", 2)
	// A success resets the doubling: the next ejection is Base again.
	tk = admitOn(t, m, at(6000), "a:1")
	m.Finish(at(6000), tk, scheduler.Done)
	tk = admitOn(t, m, at(6000), "a:1")
	m.Finish(at(6000), tk, scheduler.Unreachable)
	onlyOn(t, m, at(6999), "b:1", 2)
	admitOn(t, m, at(7000), "a:1")
	if got := m.Stats()[0].Endpoints[0].Ejections; got != 4 {
		t.Fatalf("a:1 ejections %d, want 4", got)
	}
}

func TestEjectionEndWakesTheQueue(t *testing.T) {
	pc := endpointPool(1, 1)
	pc.Ejection = scheduler.Ejection{Base: time.Second}
	m := newMachine(t, pc)
	tk := admitOn(t, m, at(0), "a:1")
	tkB, _ := admitBatch(t, m, at(0)) // b is full now
	m.Finish(at(0), tk, scheduler.Unreachable)
	w := arrive(t, m, at(1), scheduler.Request{Class: "batch"})
	d := m.Step(at(1))
	if len(d.Admitted) != 0 {
		t.Fatalf("admitted %v while a is ejected and b full", d.Admitted)
	}
	if want := at(1000); !d.Wake.Equal(want) || d.Wake.IsZero() {
		t.Fatalf("wake %v, want the ejection's end %v", d.Wake.Sub(t0), want.Sub(t0))
	}
	d = m.Step(at(1000))
	if len(d.Admitted) != 1 || d.Admitted[0] != w || endpointOf(t, m, w) != "a:1" {
		t.Fatalf("at the ejection's end admitted %v, want %d on a:1", d.Admitted, w)
	}
	m.Finish(at(1000), tkB, scheduler.Done)
}

func TestFailureBurstEjects(t *testing.T) {
	pc := endpointPool(8, 8)
	m := newMachine(t, pc) // default burst 5
	fail := func(n int, firstToken bool) {
		for i := 0; i < n; i++ {
			tk := admitOn(t, m, at(0), "a:1")
			if firstToken {
				m.FirstToken(at(0), tk)
			}
			m.Finish(at(0), tk, scheduler.Failed)
		}
	}
	fail(4, false)
	if ejected(m, "a:1") {
		t.Fatal("ejected after 4 failures, burst is 5")
	}
	// A success breaks the run; cancellations and preemptions say nothing.
	tk := admitOn(t, m, at(0), "a:1")
	m.Finish(at(0), tk, scheduler.Done)
	fail(4, false)
	tk = admitOn(t, m, at(0), "a:1")
	m.Finish(at(0), tk, scheduler.Cancelled)
	tk = admitOn(t, m, at(0), "a:1")
	m.Finish(at(0), tk, scheduler.Preempted)
	if ejected(m, "a:1") {
		t.Fatal("ejected without 5 failures in a row")
	}
	// A stream cut after its first token counts as a failure too: a dying
	// engine cuts every stream it serves.
	fail(1, true)
	if !ejected(m, "a:1") {
		t.Fatal("not ejected after 4 failures before a first token and one after it, in a row")
	}
	onlyOn(t, m, at(1), "b:1", 3)
	if s := m.Stats()[0].Endpoints[0]; s.EjectedUntil != at(0).Add(scheduler.DefaultEjectionBase) {
		t.Fatalf("ejected until %v, want the default base after the failure", s.EjectedUntil.Sub(t0))
	}
}

// TestCutStreamsEject: five streams in a row cut mid-way (each after its
// first token) eject their endpoint.
func TestCutStreamsEject(t *testing.T) {
	m := newMachine(t, endpointPool(8, 8))
	for i := range 5 {
		if ejected(m, "a:1") {
			t.Fatalf("ejected after %d cut streams, burst is 5", i)
		}
		tk := admitOn(t, m, at(0), "a:1")
		m.FirstToken(at(0), tk)
		m.Finish(at(0), tk, scheduler.Failed)
	}
	if !ejected(m, "a:1") {
		t.Fatal("not ejected after 5 cut streams in a row")
	}
}

func TestLastEndpointIsNeverEjected(t *testing.T) {
	pc := endpointPool(4, 4)
	m := newMachine(t, pc)
	tkA := admitOn(t, m, at(0), "a:1")
	tkB := admitOn(t, m, at(0), "b:1")
	m.Finish(at(0), tkA, scheduler.Unreachable)
	m.Finish(at(0), tkB, scheduler.Unreachable)
	if !ejected(m, "a:1") || ejected(m, "b:1") {
		t.Fatalf("ejected a %v b %v, want a only: b is the last endpoint left", ejected(m, "a:1"), ejected(m, "b:1"))
	}
	// Off: nothing is ejected.
	pc.Ejection.Base = -1
	m = newMachine(t, pc)
	tkA = admitOn(t, m, at(0), "a:1")
	m.Finish(at(0), tkA, scheduler.Unreachable)
	if ejected(m, "a:1") {
		t.Fatal("ejected with ejection.base < 0")
	}
	// One endpoint: never.
	one := preemptivePool(4, rails)
	m = newMachine(t, one)
	tk, _ := admitBatch(t, m, at(0))
	m.Finish(at(0), tk, scheduler.Unreachable)
	if _, err := m.Arrive(at(1), scheduler.Request{Class: "batch"}); err != nil {
		t.Fatal(err)
	}
	if d := m.Step(at(1)); len(d.Admitted) != 1 {
		t.Fatalf("single endpoint: admitted %v after an unreachable outcome, want 1", d.Admitted)
	}
}

func TestEjectionConfigErrorsNameTheField(t *testing.T) {
	for _, tc := range []struct {
		e    scheduler.Ejection
		want string
	}{
		{scheduler.Ejection{Max: -time.Second}, "ejection.max: -1s must not be negative"},
		{scheduler.Ejection{Base: 2 * time.Second, Max: time.Second}, "ejection.max: 1s must be at least ejection.base 2s"},
		{scheduler.Ejection{Burst: -1}, "ejection.burst: -1 must not be negative"},
	} {
		pc := endpointPool(1, 1)
		pc.Name = "p"
		pc.Ejection = tc.e
		_, err := scheduler.NewMachine(scheduler.Config{Pools: []scheduler.PoolConfig{pc}, Classes: twoClasses()})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want it to contain %q", tc.e, err, tc.want)
		}
	}
}

func TestAvoidPicksAnotherEndpoint(t *testing.T) {
	m := newMachine(t, endpointPool(1, 1))
	// Idle, a wins by configuration order; avoiding a, b.
	tk := arrive(t, m, at(0), scheduler.Request{Class: "batch", Avoid: "a:1"})
	if d := m.Step(at(0)); len(d.Admitted) != 1 || endpointOf(t, m, tk) != "b:1" {
		t.Fatalf("avoiding a:1: admitted %v", d.Admitted)
	}
	// Avoiding b (full anyway): a, which has room.
	tk2 := arrive(t, m, at(1), scheduler.Request{Class: "batch", Avoid: "b:1"})
	if d := m.Step(at(1)); len(d.Admitted) != 1 || endpointOf(t, m, tk2) != "a:1" {
		t.Fatalf("avoiding b:1: admitted %v", d.Admitted)
	}
	m.Finish(at(2), tk, scheduler.Done)
	m.Finish(at(2), tk2, scheduler.Done)
	// a full, b free: a request avoiding b waits for a while a is live...
	tkA := arrive(t, m, at(3), scheduler.Request{Class: "batch", Avoid: "b:1"})
	m.Step(at(3))
	w := arrive(t, m, at(3), scheduler.Request{Class: "batch", Avoid: "a:1"})
	if d := m.Step(at(3)); len(d.Admitted) != 1 || d.Admitted[0] != w || endpointOf(t, m, w) != "b:1" {
		t.Fatalf("a full: admitted %v", d.Admitted)
	}
	m.Finish(at(4), w, scheduler.Done)
	w2 := arrive(t, m, at(4), scheduler.Request{Class: "batch", Avoid: "b:1"})
	if d := m.Step(at(4)); len(d.Admitted) != 0 {
		t.Fatalf("avoiding b with a full: admitted %v, want it to wait for a", d.Admitted)
	}
	// ...and takes b when a is out.
	if err := m.SetEndpointHealth("p", "a:1", false); err != nil {
		t.Fatal(err)
	}
	if d := m.Step(at(5)); len(d.Admitted) != 1 || endpointOf(t, m, w2) != "b:1" {
		t.Fatalf("a drained: admitted %v, want the avoided b as the only one left", d.Admitted)
	}
	m.Finish(at(6), tkA, scheduler.Done)
}
