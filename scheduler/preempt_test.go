package scheduler_test

import (
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/policy/fifo"
	"github.com/llmesh/llmesh/scheduler/policy/preemptive"
)

func preemptivePool(limit int, g scheduler.PreemptionConfig) scheduler.PoolConfig {
	return scheduler.PoolConfig{MaxInflight: limit, Policy: preemptive.New(), Preemption: g}
}

var rails = scheduler.PreemptionConfig{MinLowerInflight: 1, MaxPerRequest: 3}

// fillBatch admits n batch requests (100 max tokens each) at 0ms and
// returns their tickets.
func fillBatch(t *testing.T, m *scheduler.Machine, n int) []scheduler.Ticket {
	t.Helper()
	var ts []scheduler.Ticket
	for i := 0; i < n; i++ {
		ts = append(ts, arrive(t, m, at(0), scheduler.Request{ID: string(rune('a' + i)), Class: "batch", MaxTokens: 100}))
	}
	if d := m.Step(at(0)); len(d.Admitted) != n {
		t.Fatalf("admitted %v, want %d", d.Admitted, n)
	}
	return ts
}

func TestPreemptVictimOrderAndJustEnough(t *testing.T) {
	m := newMachine(t, preemptivePool(4, rails))
	b := fillBatch(t, m, 4)
	m.Progress(at(10), b[0], scheduler.Progress{FirstToken: true, Tokens: 10})
	m.Progress(at(10), b[2], scheduler.Progress{FirstToken: true, Tokens: 2})
	m.Progress(at(10), b[3], scheduler.Progress{FirstToken: true, Tokens: 2})
	// b[1] has no first token: it goes first. Then fewest tokens; b[2] and
	// b[3] tie on tokens and priority and admission time, so the later
	// ticket (b[3]) goes before b[2].
	arrive(t, m, at(20), scheduler.Request{Class: "interactive", MaxTokens: 10})
	d := m.Step(at(20))
	if diff := cmp.Diff([]scheduler.Ticket{b[1]}, d.Preempted); diff != "" {
		t.Fatalf("first preemption (-want +got):\n%s", diff)
	}
	// The same step again preempts nothing more: the freed slot is pending.
	if d = m.Step(at(21)); len(d.Preempted) != 0 {
		t.Fatalf("repeated step preempted %v", d.Preempted)
	}
	arrive(t, m, at(22), scheduler.Request{Class: "interactive", MaxTokens: 10})
	d = m.Step(at(22))
	if diff := cmp.Diff([]scheduler.Ticket{b[3]}, d.Preempted); diff != "" {
		t.Fatalf("second preemption (-want +got):\n%s", diff)
	}
	m.Finish(at(30), b[1], scheduler.Preempted)
	m.Finish(at(31), b[3], scheduler.Preempted)
	if d = m.Step(at(31)); len(d.Admitted) != 2 {
		t.Fatalf("admitted %v after victims released, want the two interactive", d.Admitted)
	}
	if s := m.Stats()[0]; s.InFlight != 4 || s.Preempted != 2 || s.Preempting != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestPreemptMinLowerInflight(t *testing.T) {
	m := newMachine(t, preemptivePool(3, scheduler.PreemptionConfig{MinLowerInflight: 3, MaxPerRequest: 3}))
	fillBatch(t, m, 3)
	arrive(t, m, at(1), scheduler.Request{Class: "interactive"})
	arrive(t, m, at(1), scheduler.Request{Class: "interactive"})
	d := m.Step(at(1))
	// 3 lower in flight allow one victim; then only 2 remain.
	if len(d.Preempted) != 1 {
		t.Fatalf("preempted %v, want exactly one", d.Preempted)
	}
}

func TestPreemptMinRunTime(t *testing.T) {
	m := newMachine(t, preemptivePool(1, scheduler.PreemptionConfig{MinRunTime: 100 * time.Millisecond, MaxPerRequest: 3}))
	b := fillBatch(t, m, 1)
	arrive(t, m, at(10), scheduler.Request{Class: "interactive"})
	d := m.Step(at(10))
	if len(d.Preempted) != 0 || !d.Wake.Equal(at(100)) {
		t.Fatalf("preempted %v wake %v, want none and %v", d.Preempted, d.Wake, at(100))
	}
	d = m.Step(at(100))
	if diff := cmp.Diff([]scheduler.Ticket{b[0]}, d.Preempted); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
}

func TestPreemptMaxPerRequest(t *testing.T) {
	m := newMachine(t, preemptivePool(1, scheduler.PreemptionConfig{MaxPerRequest: 1}))
	b := fillBatch(t, m, 1)
	i1 := arrive(t, m, at(1), scheduler.Request{Class: "interactive"})
	if d := m.Step(at(1)); len(d.Preempted) != 1 {
		t.Fatalf("preempted %v, want one", d.Preempted)
	}
	m.Finish(at(2), b[0], scheduler.Preempted)
	m.Step(at(2))
	again := arrive(t, m, at(3), scheduler.Request{ID: "a", Class: "batch", MaxTokens: 100, Requeue: true, Arrival: at(0)})
	m.Finish(at(4), i1, scheduler.Done)
	if d := m.Step(at(4)); len(d.Admitted) != 1 || d.Admitted[0] != again {
		t.Fatalf("admitted %v, want requeued %d", d.Admitted, again)
	}
	arrive(t, m, at(5), scheduler.Request{Class: "interactive"})
	if d := m.Step(at(5)); len(d.Preempted) != 0 {
		t.Fatalf("request preempted twice with max_per_request 1: %v", d.Preempted)
	}
}

func TestNoPreemptionWhenNotAtRisk(t *testing.T) {
	m := newMachine(t, preemptivePool(1, rails))
	b := fillBatch(t, m, 1)
	// 98 of 100 tokens done at 100ms/token: 200ms left... observed TPOT
	// 10ms makes it 20ms, well within the 200ms TTFT objective.
	m.Progress(at(10), b[0], scheduler.Progress{FirstToken: true, Tokens: 1})
	m.Progress(at(990), b[0], scheduler.Progress{FirstToken: true, Tokens: 98})
	arrive(t, m, at(1000), scheduler.Request{Class: "interactive"})
	d := m.Step(at(1000))
	if len(d.Preempted) != 0 {
		t.Fatalf("preempted %v though the slot frees in time", d.Preempted)
	}
	if d.Wake.IsZero() || d.Wake.After(at(1200)) {
		t.Fatalf("wake %v, want a re-check before the objective passes at %v", d.Wake, at(1200))
	}
	// Nothing happened by the wake-up (the batch request stalled): now it
	// is at risk.
	if d = m.Step(d.Wake); len(d.Preempted) != 1 {
		t.Fatalf("at wake %v preempted %v, want the stalled request", d.Wake, d.Preempted)
	}
}

func TestNeverPreemptEqualOrProtected(t *testing.T) {
	classes := twoClasses()
	classes[1].Preemptible = false
	m := newMachine(t, preemptivePool(2, rails), classes...)
	fillBatch(t, m, 1)
	arrive(t, m, at(0), scheduler.Request{Class: "interactive"})
	m.Step(at(0))
	arrive(t, m, at(1), scheduler.Request{Class: "interactive"})
	if d := m.Step(at(1)); len(d.Preempted) != 0 {
		t.Fatalf("preempted %v: equal priority and non-preemptible work must run on", d.Preempted)
	}
}

func TestNonPreemptivePolicyNeverPreempts(t *testing.T) {
	m := newMachine(t, scheduler.PoolConfig{MaxInflight: 1, Policy: fifo.New(), Preemption: rails})
	fillBatch(t, m, 1)
	arrive(t, m, at(1), scheduler.Request{Class: "interactive"})
	if d := m.Step(at(1)); len(d.Preempted) != 0 {
		t.Fatalf("fifo preempted %v", d.Preempted)
	}
}

// An aged low-priority request at the head of the walk takes the first
// freed slot, so making room for an at-risk urgent request behind it would
// mean preempting a request of the aged one's own class to admit it: a swap
// of equals that only wastes work. Neither is preempted for, and the walk
// settles at once (it used to stop there too, but for the wrong reason:
// it stopped at any head that could not preempt).
func TestPreemptNoSwapForAgedHead(t *testing.T) {
	pc := preemptivePool(2, rails)
	pc.Aging = time.Second
	m := newMachine(t, pc)
	fillBatch(t, m, 2)
	arrive(t, m, at(0), scheduler.Request{Class: "batch", MaxTokens: 100})
	m.Step(at(0))
	// At 11 s the old batch request has aged 11 levels (effective priority
	// -1), ahead of the interactive class (0), and it is past its own
	// objective.
	arrive(t, m, at(11_000), scheduler.Request{Class: "interactive", MaxTokens: 10})
	if d := m.Step(at(11_000)); len(d.Preempted) != 0 {
		t.Fatalf("preempted %v to make room behind an aged batch request", d.Preempted)
	}
}

// With three classes the walk goes past a head no victim can help: an
// aged standard request (its victims would be batch) is ahead of an
// interactive one; both are covered by preempting two batch requests.
func TestPreemptWalkPastAgedHead(t *testing.T) {
	classes := []scheduler.ClassConfig{
		{Name: "interactive", Priority: 0, TTFT: 200 * time.Millisecond, TPOT: 30 * time.Millisecond},
		{Name: "standard", Priority: 5, TTFT: 10 * time.Second, TPOT: 50 * time.Millisecond, Preemptible: true},
		{Name: "batch", Priority: 10, TTFT: 5 * time.Second, TPOT: 100 * time.Millisecond, Preemptible: true},
	}
	pc := preemptivePool(3, rails)
	pc.Aging = time.Second
	m := newMachine(t, pc, classes...)
	st := arrive(t, m, at(0), scheduler.Request{Class: "standard", MaxTokens: 100})
	m.Step(at(0))
	b := fillBatch(t, m, 2)
	old := arrive(t, m, at(0), scheduler.Request{Class: "standard", MaxTokens: 100})
	m.Step(at(0))
	// At 6 s the waiting standard request has aged to priority -1, ahead
	// of the interactive class, and with the 5 s the running standard
	// request still needs it would pass its 10 s objective.
	i := arrive(t, m, at(6_000), scheduler.Request{Class: "interactive", MaxTokens: 10})
	d := m.Step(at(6_000))
	if !cmp.Equal(sortTickets(d.Preempted), sortTickets(b)) {
		t.Fatalf("preempted %v, want both batch requests %v (not the running standard %d)", d.Preempted, b, st)
	}
	m.Finish(at(6_001), b[0], scheduler.Preempted)
	m.Finish(at(6_001), b[1], scheduler.Preempted)
	if d = m.Step(at(6_001)); !cmp.Equal(d.Admitted, []scheduler.Ticket{old, i}) {
		t.Fatalf("admitted %v, want the aged standard %d then the interactive %d", d.Admitted, old, i)
	}
}

func sortTickets(ts []scheduler.Ticket) []scheduler.Ticket {
	out := slices.Clone(ts)
	slices.Sort(out)
	return out
}

// A request that is not at risk does not end the walk: one behind it with a
// longer predicted prefill can be at risk first.
func TestPreemptWalkPastNotAtRisk(t *testing.T) {
	classes := twoClasses()
	classes[1].TPOT = time.Millisecond // the batch requests finish in 100 ms
	m, err := scheduler.NewMachine(scheduler.Config{
		Pools:   []scheduler.PoolConfig{{Name: "p", MaxInflight: 2, Policy: preemptive.New(), Preemption: rails}},
		Classes: classes,
		// 1 ms of prefill per prompt token.
		PrefillPredictor: func(_ string, prompt int) time.Duration { return time.Duration(prompt) * time.Millisecond },
	})
	if err != nil {
		t.Fatal(err)
	}
	fillBatch(t, m, 2)
	// Both wait ~100 ms for a slot: the short prompt's prediction is
	// 110 ms, within the 200 ms objective; the long one's 250 ms is not,
	// and it needs the second slot (the first goes to the short one).
	arrive(t, m, at(0), scheduler.Request{Class: "interactive", PromptTokens: 10, MaxTokens: 10})
	arrive(t, m, at(0), scheduler.Request{Class: "interactive", PromptTokens: 150, MaxTokens: 10})
	if d := m.Step(at(0)); len(d.Preempted) != 2 {
		t.Fatalf("preempted %v, want two victims for the at-risk second request", d.Preempted)
	}
}

// TestNoPreemptionWhileDrained: a pool whose only endpoint is drained (its
// metrics scrape failed) admits nothing, so a victim's slot would go to no
// one. An urgent arrival preempts nothing until the endpoint is back, and
// then exactly one victim.
func TestNoPreemptionWhileDrained(t *testing.T) {
	m := newMachine(t, preemptivePool(2, rails))
	fillBatch(t, m, 2)
	if err := m.SetEndpointHealth("p", "", false); err != nil {
		t.Fatal(err)
	}
	arrive(t, m, at(10), scheduler.Request{Class: "interactive", MaxTokens: 10})
	for _, ms := range []int{10, 20, 30} {
		if d := m.Step(at(ms)); len(d.Preempted) != 0 || len(d.Admitted) != 0 {
			t.Fatalf("drained pool at %dms: preempted %v, admitted %v", ms, d.Preempted, d.Admitted)
		}
	}
	if err := m.SetEndpointHealth("p", "", true); err != nil {
		t.Fatal(err)
	}
	d := m.Step(at(40))
	if len(d.Preempted) != 1 {
		t.Fatalf("endpoint back: preempted %v, want one victim", d.Preempted)
	}
	m.Finish(at(45), d.Preempted[0], scheduler.Preempted)
	if d = m.Step(at(45)); len(d.Admitted) != 1 || len(d.Preempted) != 0 {
		t.Fatalf("after the release: admitted %v, preempted %v; want the urgent request alone", d.Admitted, d.Preempted)
	}
}
