package scheduler_test

import (
	"testing"
	"time"

	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/policy/priority"
	"github.com/llmesh/llmesh/scheduler/pools"
	"github.com/llmesh/llmesh/scheduler/server"
)

// A preemptive pool with no bounds configured derives them from what it
// observes: a reserve once urgent arrivals and finishes have rates,
// a prefill cap once a prefill was timed; StaticBounds and a policy that
// does not preempt keep them off, and a static bound is used as given.
func TestDerivedBounds(t *testing.T) {
	drive := func(pc scheduler.PoolConfig) scheduler.Bounds {
		t.Helper()
		m := newMachine(t, pc)
		steadyTraffic(t, m)
		return m.Bounds("p")
	}
	pc := preemptivePool(16, rails)
	got := drive(pc)
	if t.Failed() {
		return
	}
	// q = λ/(λ+μ) = 2/(2+10) ≈ 0.17: q² ≈ 0.03 ≤ 0.1, so one slot; the cap is
	// 10% of the 200 ms objective at 50 µs per token = 400 tokens, raised
	// to the other classes' mean prompt, 1000.
	// The budget: twice the 50 ms prefill, at least half the objective.
	if want := (scheduler.Bounds{ReserveUrgent: 1, MaxPrefillTokens: 1000, PreemptionBudget: 100 * time.Millisecond, Derived: true}); got != want {
		t.Errorf("derived %+v, want %+v", got, want)
	}
	pc.ReserveUrgent, pc.MaxPrefillTokens = 3, 2048
	if got, want := drive(pc), (scheduler.Bounds{ReserveUrgent: 3, MaxPrefillTokens: 2048, PreemptionBudget: 100 * time.Millisecond, Derived: true}); got != want {
		t.Errorf("static settings: %+v, want %+v", got, want)
	}
	pc = preemptivePool(16, rails)
	pc.StaticBounds = true
	if got := drive(pc); got != (scheduler.Bounds{PreemptionBudget: 200 * time.Millisecond}) {
		t.Errorf("StaticBounds: %+v, want no bounds and the whole objective as budget", got)
	}
	pc = scheduler.PoolConfig{MaxInflight: 16, Policy: priority.New()}
	if got := drive(pc); got != (scheduler.Bounds{}) {
		t.Errorf("priority: %+v, want none", got)
	}
}

// With no observations yet a preemptive pool has no derived bounds: the
// first requests are admitted as before.
func TestDerivedBoundsStartOff(t *testing.T) {
	m := newMachine(t, preemptivePool(2, rails))
	if b := m.Bounds("p"); b.ReserveUrgent != 0 || b.MaxPrefillTokens != 0 {
		t.Fatalf("bounds before any traffic: %+v", b)
	}
	arrive(t, m, at(0), scheduler.Request{Class: "batch", PromptTokens: 100, MaxTokens: 10})
	arrive(t, m, at(0), scheduler.Request{Class: "batch", PromptTokens: 100, MaxTokens: 10})
	if d := m.Step(at(0)); len(d.Admitted) != 2 {
		t.Fatalf("admitted %v, want both", d.Admitted)
	}
	if b := m.Bounds("nope"); b != (scheduler.Bounds{}) {
		t.Errorf("unknown pool: %+v", b)
	}
}

// TestBoundsExported: the bounds in effect are gauges per pool next to the
// pool's other scheduler gauges, and follow what the pool derives: none
// before traffic, then the reserve, the prefill cap and the budget the
// pool derived from it.
func TestBoundsExported(t *testing.T) {
	m := newMachine(t, preemptivePool(16, rails))
	c := server.NewCollector(m.Stats)
	gauges := func() [3]float64 {
		return [3]float64{poolGauge(t, c, "llmesh_scheduler_reserve_urgent", "p"),
			poolGauge(t, c, "llmesh_scheduler_max_prefill_tokens", "p"),
			poolGauge(t, c, "llmesh_scheduler_preemption_budget_seconds", "p")}
	}
	// Before any prefill is timed the budget is half the 200 ms objective.
	if got, want := gauges(), [3]float64{0, 0, 0.1}; got != want {
		t.Errorf("before traffic: %v, want %v", got, want)
	}
	steadyTraffic(t, m)
	b := m.Bounds("p")
	if got, want := gauges(), [3]float64{float64(b.ReserveUrgent), float64(b.MaxPrefillTokens), b.PreemptionBudget.Seconds()}; got != want || want != [3]float64{1, 1000, 0.1} {
		t.Errorf("after traffic: gauges %v, Bounds %v; want both [1 1000 0.1]", got, want)
	}
}

// TestStaticBoundsFromMesh: pools[].scheduler.static_bounds and
// preemption.abort_probe reach the scheduler's pool config.
func TestStaticBoundsFromMesh(t *testing.T) {
	cfg, err := config.Load([]byte(`
pools:
  - {name: a, protocol: openai, endpoints: [h:1], scheduler: {policy: preemptive, static_bounds: true, preemption: {abort_probe: 30s}}}
  - {name: b, protocol: openai, endpoints: [h:2], scheduler: {policy: preemptive}}
  - {name: c, protocol: openai, endpoints: [h:3], scheduler: {policy: preemptive, overload_release: 0}}
  - {name: d, protocol: openai, endpoints: [h:4], scheduler: {policy: preemptive, overload_release: 25}}
`))
	if err != nil {
		t.Fatal(err)
	}
	sc, err := pools.Config(cfg)
	if err != nil {
		t.Fatal(err)
	}
	a, b := sc.Pools[0], sc.Pools[1]
	if !a.StaticBounds || a.Preemption.AbortProbe != 30*time.Second {
		t.Errorf("pool a: static %v, abort probe %v; want true, 30s", a.StaticBounds, a.Preemption.AbortProbe)
	}
	if b.StaticBounds || b.Preemption.AbortProbe != 5*time.Minute || b.OverloadRelease != 0 {
		t.Errorf("pool b: static %v, abort probe %v, overload release %v; want the defaults false, 5m, 0", b.StaticBounds, b.Preemption.AbortProbe, b.OverloadRelease)
	}
	if c, d := sc.Pools[2], sc.Pools[3]; c.OverloadRelease >= 0 || d.OverloadRelease != 25 {
		t.Errorf("overload_release 0 and 25 gave %v and %v; want never (negative) and 25", c.OverloadRelease, d.OverloadRelease)
	}
}

// TestOverloadReleasesBounds: once a batch request has waited ten times
// its class's 5 s TTFT objective the pool is overloaded: the derived
// reserve is 0, the derived prefill cap one engine step's budget (8192
// tokens on the pool's one endpoint) and the preemption budget the whole
// urgent objective, so the capacity held back for the urgent class goes to
// the work that is falling behind. When the queue has caught up the derived
// bounds are back. Bounds set in the config are not released (the budget,
// always derived, is).
func TestOverloadReleasesBounds(t *testing.T) {
	for _, static := range []bool{false, true} {
		pc := preemptivePool(16, rails)
		if static {
			pc.ReserveUrgent, pc.MaxPrefillTokens = 2, 512
		}
		overloadBounds(t, pc, static)
	}
}

// With OverloadRelease negative the derived bounds never give way.
func TestOverloadReleaseOff(t *testing.T) {
	pc := preemptivePool(16, rails)
	pc.OverloadRelease = -1
	m := newMachine(t, pc)
	now := steadyTraffic(t, m)
	for i := 0; i < 17; i++ {
		arrive(t, m, now, scheduler.Request{Class: "batch", PromptTokens: 10, MaxTokens: 10})
	}
	m.Step(now)
	calm := m.Bounds("p")
	m.Step(now.Add(10 * time.Minute))
	if got := m.Bounds("p"); got != calm || calm.ReserveUrgent == 0 {
		t.Errorf("waited 10 min with the release off: %+v, want the calm bounds %+v (with a reserve)", got, calm)
	}
}

// overloadBounds drives pc past the overload release and back (the rule
// TestOverloadReleasesBounds states).
func overloadBounds(t *testing.T, pc scheduler.PoolConfig, static bool) {
	t.Helper()
	m := newMachine(t, pc)
	now := steadyTraffic(t, m)
	// Sixteen batch requests fill the pool; one more waits.
	for i := 0; i < 16; i++ {
		arrive(t, m, now, scheduler.Request{Class: "batch", PromptTokens: 10, MaxTokens: 10})
	}
	late := now
	arrive(t, m, late, scheduler.Request{Class: "batch", PromptTokens: 10, MaxTokens: 10})
	d := m.Step(now)
	running := d.Admitted
	calm := m.Bounds("p")
	if got := m.Step(late.Add(49 * time.Second)); len(got.Admitted) != 0 {
		t.Fatalf("admitted %v with the pool full", got.Admitted)
	}
	if got := m.Bounds("p"); got != calm {
		t.Errorf("static %v: waited 49s: %+v, want the calm bounds %+v", static, got, calm)
	}
	m.Step(late.Add(51 * time.Second))
	want := scheduler.Bounds{MaxPrefillTokens: 8192, PreemptionBudget: 200 * time.Millisecond, Derived: true}
	if static {
		want = calm
		want.PreemptionBudget = 200 * time.Millisecond
	}
	if got := m.Bounds("p"); got != want {
		t.Errorf("static %v: waited 51s: %+v, want %+v", static, got, want)
	}
	for _, tk := range running {
		m.Finish(late.Add(52*time.Second), tk, scheduler.Done)
	}
	m.Step(late.Add(52 * time.Second)) // admits the late one
	m.Step(late.Add(52 * time.Second)) // the queue is empty
	// Derived again (the reserve follows the finish rate, which the
	// sixteen finishes at once moved).
	if got := m.Bounds("p"); got.ReserveUrgent == 0 || got.MaxPrefillTokens != calm.MaxPrefillTokens ||
		got.PreemptionBudget != calm.PreemptionBudget || (static && got != calm) {
		t.Errorf("static %v: caught up: %+v, want bounds as before %+v", static, got, calm)
	}
}

// steadyTraffic drives m from at(0) for 20 s: other classes finish every
// 100 ms, urgent requests arrive every 500 ms, and each prompt of 1000
// tokens takes 50 ms to its first token (50 µs per token). It returns the
// time it reached.
func steadyTraffic(t *testing.T, m *scheduler.Machine) time.Time {
	t.Helper()
	now := at(0)
	for i := 0; i < 200; i++ {
		class := "batch"
		if i%5 == 0 {
			class = "interactive"
		}
		tk := arrive(t, m, now, scheduler.Request{Class: class, PromptTokens: 1000, MaxTokens: 10})
		m.Step(now)
		m.Progress(now.Add(50*time.Millisecond), tk, scheduler.Progress{FirstToken: true, Tokens: 1})
		m.Finish(now.Add(60*time.Millisecond), tk, scheduler.Done)
		now = now.Add(100 * time.Millisecond)
	}
	return now
}

// TestOverloadPrefillCapFollowsThroughput: an overloaded pool's prefill cap
// is what it prefills in half the urgent objective at its observed prefill
// throughput when that is more than one engine step (an endpoint that is
// several engines): prompts of 20,000 tokens reaching their first token
// every 100 ms are 200,000 tokens a second, so ≈ 20,000 tokens in 100 ms.
func TestOverloadPrefillCapFollowsThroughput(t *testing.T) {
	m := newMachine(t, preemptivePool(16, rails))
	now := at(0)
	for i := 0; i < 200; i++ {
		tk := arrive(t, m, now, scheduler.Request{Class: "batch", PromptTokens: 20000, MaxTokens: 10})
		m.Step(now)
		m.Progress(now.Add(50*time.Millisecond), tk, scheduler.Progress{FirstToken: true, Tokens: 1})
		m.Finish(now.Add(60*time.Millisecond), tk, scheduler.Done)
		now = now.Add(100 * time.Millisecond)
	}
	for i := 0; i < 17; i++ {
		arrive(t, m, now, scheduler.Request{Class: "batch", PromptTokens: 10, MaxTokens: 10})
	}
	m.Step(now)
	m.Step(now.Add(51 * time.Second))
	if got := m.Bounds("p").MaxPrefillTokens; got < 20000 || got > 20100 {
		t.Errorf("overloaded at 200,000 prefilled tokens/s: prefill cap %d, want ≈ 20,000", got)
	}
}

// TestReserveCountsEveryFinish: a finish of an urgent request frees a
// reserved slot as well as any other finish, so the derived reserve counts
// every class's finishes: urgent arrivals at 2/s against finishes at 4/s
// (2/s of each class) give q = 1/3 and a reserve of 2 (counting only the
// batch finishes would give q = 1/2 and 3).
func TestReserveCountsEveryFinish(t *testing.T) {
	m := newMachine(t, preemptivePool(64, rails))
	now := at(0)
	for i := 0; i < 400; i++ {
		class := "batch"
		if i%2 == 0 {
			class = "interactive"
		}
		tk := arrive(t, m, now, scheduler.Request{Class: class, PromptTokens: 1000, MaxTokens: 10})
		m.Step(now)
		m.Progress(now.Add(50*time.Millisecond), tk, scheduler.Progress{FirstToken: true, Tokens: 1})
		m.Finish(now.Add(60*time.Millisecond), tk, scheduler.Done)
		now = now.Add(250 * time.Millisecond)
	}
	if got := m.Bounds("p").ReserveUrgent; got != 2 {
		t.Errorf("reserve %d, want 2", got)
	}
}
