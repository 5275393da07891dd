package policy_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/policy"
)

// The cost rules of preemption (scheduler/cost.go), one case per rule, run
// over every registered policy: a policy that preempts must follow each
// rule, one that does not must never preempt in these situations.

func TestConformanceCostRules(t *testing.T) {
	for _, p := range policy.All() {
		t.Run(p.Name(), func(t *testing.T) {
			t.Parallel()
			t.Run("WaitWithinObjective", func(t *testing.T) { costWaitWithinObjective(t, p) })
			t.Run("WaitingCheaper", func(t *testing.T) { costWaitingCheaper(t, p) })
			t.Run("FinishingNeverVictim", func(t *testing.T) { costFinishingNeverVictim(t, p) })
			t.Run("CheapestVictimFirst", func(t *testing.T) { costCheapestFirst(t, p) })
			t.Run("OverloadNothingSunk", func(t *testing.T) { costOverloadNothingSunk(t, p) })
		})
	}
}

var costRails = scheduler.PreemptionConfig{MinLowerInflight: 1, MaxPerRequest: 3}

func ms(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }

// costPool admits the batch requests given (prompt, max tokens) at 0 ms and
// returns the machine and their tickets.
func costPool(t *testing.T, p scheduler.Policy, limit int, reqs ...[2]int) (*scheduler.Machine, []scheduler.Ticket) {
	t.Helper()
	// Static bounds: the cost rules alone, against the objective itself.
	m := machine(t, p, scheduler.PoolConfig{MaxInflight: limit, Preemption: costRails, StaticBounds: true})
	var ts []scheduler.Ticket
	for i, r := range reqs {
		tk, err := m.Arrive(ms(0), scheduler.Request{ID: string(rune('a' + i)), Class: "batch", PromptTokens: r[0], MaxTokens: r[1]})
		if err != nil {
			t.Fatal(err)
		}
		ts = append(ts, tk)
	}
	if d := m.Step(ms(0)); len(d.Admitted) != len(reqs) {
		t.Fatalf("admitted %v, want %d", d.Admitted, len(reqs))
	}
	return m, ts
}

// want checks the preemptions of a step against what a preemptive policy
// must do (none for the others).
func want(t *testing.T, p scheduler.Policy, d scheduler.Decisions, preemptive []scheduler.Ticket) {
	t.Helper()
	if !scheduler.Preempts(p) {
		preemptive = nil
	}
	if diff := cmp.Diff(preemptive, d.Preempted); diff != "" {
		t.Errorf("preempted (-want +got):\n%s", diff)
	}
}

// Waiting within the objective: the one slot frees (observed 10 ms per
// token, 3 tokens left: 30 ms) well within the 100 ms objective, so nothing
// is preempted, whatever it would cost.
func costWaitWithinObjective(t *testing.T, p scheduler.Policy) {
	m, b := costPool(t, p, 1, [2]int{0, 100})
	m.Progress(ms(10), b[0], scheduler.Progress{FirstToken: true, Tokens: 1})
	m.Progress(ms(970), b[0], scheduler.Progress{FirstToken: true, Tokens: 97})
	if _, err := m.Arrive(ms(970), scheduler.Request{Class: "interactive", MaxTokens: 10}); err != nil {
		t.Fatal(err)
	}
	want(t, p, m.Step(ms(970)), nil)
}

// Waiting is cheaper: the urgent request is at risk (predicted prefill
// 100 ms uses its whole 100 ms objective, so it is late by the whole wait),
// but the victim finishes in 50 ms (5 tokens at 10 ms) while preempting it
// would recompute its 2000 prompt and 95 generated tokens at the observed
// 50 µs per prompt token: 105 ms of engine time for 50 ms of lateness.
// With no prompt sizes known the recompute counts as free and the same
// victim goes, as before the cost rules.
func costWaitingCheaper(t *testing.T, p scheduler.Policy) {
	m, b := costPool(t, p, 1, [2]int{2000, 100})
	m.Progress(ms(100), b[0], scheduler.Progress{FirstToken: true, Tokens: 1})
	m.Progress(ms(1040), b[0], scheduler.Progress{FirstToken: true, Tokens: 95})
	if _, err := m.Arrive(ms(1040), scheduler.Request{Class: "interactive", PromptTokens: 500, MaxTokens: 10}); err != nil {
		t.Fatal(err)
	}
	want(t, p, m.Step(ms(1040)), nil)

	m, b = costPool(t, p, 1, [2]int{0, 100})
	m.Progress(ms(100), b[0], scheduler.Progress{FirstToken: true, Tokens: 1})
	m.Progress(ms(1040), b[0], scheduler.Progress{FirstToken: true, Tokens: 95})
	if _, err := m.Arrive(ms(1040), scheduler.Request{Class: "interactive", MaxTokens: 10}); err != nil {
		t.Fatal(err)
	}
	want(t, p, m.Step(ms(1040)), []scheduler.Ticket{b[0]})
}

// A request that finishes within the step a preemption takes is never a
// victim, though the design's order (fewest generated tokens) would pick
// it: b[0] has 1 of its 10 tokens left, b[1] 950 of 1000.
func costFinishingNeverVictim(t *testing.T, p scheduler.Policy) {
	m, b := costPool(t, p, 2, [2]int{0, 10}, [2]int{0, 1000})
	m.Progress(ms(10), b[0], scheduler.Progress{FirstToken: true, Tokens: 1})
	m.Progress(ms(10), b[1], scheduler.Progress{FirstToken: true, Tokens: 1})
	m.Progress(ms(90), b[0], scheduler.Progress{FirstToken: true, Tokens: 9})
	m.Progress(ms(500), b[1], scheduler.Progress{FirstToken: true, Tokens: 50})
	if _, err := m.Arrive(ms(500), scheduler.Request{Class: "interactive", MaxTokens: 10}); err != nil {
		t.Fatal(err)
	}
	// b[0]'s one token left (observed 10 ms per token) frees a slot within
	// the objective: nothing to do yet.
	want(t, p, m.Step(ms(500)), nil)
	// b[0] stalls: 200 ms later it is still predicted to finish within a
	// step, the urgent request is at risk now, and the victim must be b[1].
	want(t, p, m.Step(ms(700)), []scheduler.Ticket{b[1]})
}

// Among eligible victims the cheapest recompute goes first: b[0] (prompt
// 2000, 10 tokens) would be the design's first victim (fewest generated
// tokens), b[1] (prompt 200, 50 tokens) recomputes far less.
func costCheapestFirst(t *testing.T, p scheduler.Policy) {
	m, b := costPool(t, p, 2, [2]int{2000, 1000}, [2]int{200, 1000})
	m.Progress(ms(100), b[0], scheduler.Progress{FirstToken: true, Tokens: 1})
	m.Progress(ms(100), b[1], scheduler.Progress{FirstToken: true, Tokens: 1})
	m.Progress(ms(1000), b[0], scheduler.Progress{FirstToken: true, Tokens: 10})
	m.Progress(ms(1000), b[1], scheduler.Progress{FirstToken: true, Tokens: 50})
	if _, err := m.Arrive(ms(1000), scheduler.Request{Class: "interactive", PromptTokens: 100, MaxTokens: 10}); err != nil {
		t.Fatal(err)
	}
	want(t, p, m.Step(ms(1000)), []scheduler.Ticket{b[1]})
}

// In an overloaded pool a victim must have nothing sunk: the same victim
// (no prompt size known, so its recompute counts as free) is preempted
// while the batch request waiting behind has waited 4 s, and not once it
// has waited 6 s, past ten times its class's 500 ms objective (the derived
// bounds' overload release, scheduler/tune.go).
func costOverloadNothingSunk(t *testing.T, p scheduler.Policy) {
	for _, waited := range []int{4000, 6000} {
		m := machine(t, p, scheduler.PoolConfig{MaxInflight: 1, Preemption: costRails})
		b, err := m.Arrive(ms(0), scheduler.Request{ID: "b", Class: "batch", MaxTokens: 1000})
		if err != nil {
			t.Fatal(err)
		}
		if d := m.Step(ms(0)); len(d.Admitted) != 1 {
			t.Fatalf("admitted %v, want the batch request", d.Admitted)
		}
		if _, err := m.Arrive(ms(0), scheduler.Request{ID: "w", Class: "batch", MaxTokens: 10}); err != nil {
			t.Fatal(err)
		}
		m.Progress(ms(10), b, scheduler.Progress{FirstToken: true, Tokens: 1})
		m.Progress(ms(waited), b, scheduler.Progress{FirstToken: true, Tokens: waited / 10})
		if _, err := m.Arrive(ms(waited), scheduler.Request{Class: "interactive", MaxTokens: 10}); err != nil {
			t.Fatal(err)
		}
		var victims []scheduler.Ticket
		if waited < 5000 {
			victims = []scheduler.Ticket{b}
		}
		t.Logf("batch waited %d ms", waited)
		want(t, p, m.Step(ms(waited)), victims)
	}
}
