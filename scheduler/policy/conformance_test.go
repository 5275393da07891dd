package policy_test

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/policy"
)

// The conformance suite runs over every registered policy: a new policy is
// tested by adding it to the registry.

var t0 = time.Unix(1_700_000_000, 0)

func classes() []scheduler.ClassConfig {
	return []scheduler.ClassConfig{
		{Name: "interactive", Priority: 0, TTFT: 100 * time.Millisecond, TPOT: 20 * time.Millisecond, MaxQueue: 1000},
		{Name: "standard", Priority: 5, TTFT: 300 * time.Millisecond, TPOT: 50 * time.Millisecond, Preemptible: true, MaxQueue: 64},
		{Name: "batch", Priority: 10, TTFT: 500 * time.Millisecond, TPOT: 100 * time.Millisecond, Preemptible: true, MaxQueue: 64},
	}
}

func machine(t testing.TB, p scheduler.Policy, pc scheduler.PoolConfig) *scheduler.Machine {
	t.Helper()
	pc.Name, pc.Policy = "p", p
	m, err := scheduler.NewMachine(scheduler.Config{Pools: []scheduler.PoolConfig{pc}, Classes: classes()})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestRegistry(t *testing.T) {
	for _, name := range []string{"fifo", "priority", "preemptive", "edf"} {
		p, err := policy.Lookup(name)
		if err != nil || p.Name() != name {
			t.Errorf("Lookup(%q) = %v, %v", name, p, err)
		}
	}
	if _, err := policy.Lookup("lifo"); err == nil {
		t.Error("Lookup(lifo) succeeded")
	}
	for name, want := range map[string]bool{"fifo": false, "priority": false, "edf": false, "preemptive": true} {
		if p, _ := policy.Lookup(name); p != nil && scheduler.Preempts(p) != want {
			t.Errorf("%s preempts: %v, want %v", name, !want, want)
		}
	}
}

func TestConformance(t *testing.T) {
	for _, p := range policy.All() {
		t.Run(p.Name(), func(t *testing.T) {
			t.Parallel()
			t.Run("StrictOrder", func(t *testing.T) { strictOrder(t, p) })
			t.Run("FIFOWithinClass", func(t *testing.T) { fifoWithinClass(t, p) })
			t.Run("AgingBound", func(t *testing.T) { agingBound(t, p) })
			t.Run("Random", func(t *testing.T) { randomEvents(t, p, 100_000, 0, 0) })
			t.Run("RandomAdmissionBounds", func(t *testing.T) { randomEvents(t, p, 20_000, 2000, 2) })
			if pre, ok := p.(scheduler.Preemptor); ok {
				t.Run("VictimContract", func(t *testing.T) { victimContract(t, pre) })
				t.Run("RescuesAtRisk", func(t *testing.T) { rescuesAtRisk(t, p) })
			}
		})
	}
}

// strictOrder: Less must be a strict total order on distinct entries, or
// the admission order would depend on queue layout.
func strictOrder(t *testing.T, p scheduler.Policy) {
	rng := rand.New(rand.NewPCG(1, 2))
	es := make([]*scheduler.Entry, 40)
	for i := range es {
		arr := t0.Add(time.Duration(rng.IntN(5)) * time.Millisecond)
		e := &scheduler.Entry{Priority: rng.IntN(3) * 5, Arrival: arr, Seq: uint64(i + 1)}
		e.EffectivePriority = e.Priority - rng.IntN(2)
		if rng.IntN(3) > 0 {
			e.Deadline = arr.Add(time.Duration(rng.IntN(3)*100) * time.Millisecond)
		}
		es[i] = e
	}
	for _, a := range es {
		if p.Less(a, a) {
			t.Fatalf("Less(a, a) for %+v", a)
		}
		for _, b := range es {
			if a != b && p.Less(a, b) == p.Less(b, a) {
				t.Fatalf("not a total order: Less(a,b)=%v Less(b,a)=%v for %+v, %+v", p.Less(a, b), p.Less(b, a), a, b)
			}
			for _, c := range es {
				if p.Less(a, b) && p.Less(b, c) && !p.Less(a, c) {
					t.Fatalf("not transitive: %+v < %+v < %+v", a, b, c)
				}
			}
		}
	}
}

// fifoWithinClass: requests of one class are admitted in arrival order.
func fifoWithinClass(t *testing.T, p scheduler.Policy) {
	m := machine(t, p, scheduler.PoolConfig{MaxInflight: 1, Aging: 50 * time.Millisecond})
	now := t0
	var want []scheduler.Ticket
	for i := 0; i < 20; i++ {
		tk, err := m.Arrive(now, scheduler.Request{Class: classes()[i%3].Name})
		if err != nil {
			t.Fatal(err)
		}
		if i%3 == 1 {
			want = append(want, tk)
		}
		now = now.Add(time.Millisecond)
	}
	var got []scheduler.Ticket
	isStd := map[scheduler.Ticket]bool{}
	for _, tk := range want {
		isStd[tk] = true
	}
	for i := 0; i < 20; i++ {
		d := m.Step(now)
		if len(d.Admitted) != 1 {
			t.Fatalf("step %d admitted %v, want one", i, d.Admitted)
		}
		if isStd[d.Admitted[0]] {
			got = append(got, d.Admitted[0])
		}
		now = now.Add(7 * time.Millisecond)
		m.Finish(now, d.Admitted[0], scheduler.Done)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("class order %v, want %v", got, want)
		}
	}
}

// agingBound: under a sustained overload of interactive requests (arrivals
// faster than service) a batch request is never overtaken by a request that
// arrived more than B after it, where B = max((Δpriority+1)·aging,
// ΔTTFT objective): priority order is bounded by aging, EDF by deadlines,
// FIFO by arrival. So it is admitted, not starved (strict priority without
// aging would starve it).
func agingBound(t *testing.T, p scheduler.Policy) {
	const (
		aging   = 100 * time.Millisecond
		service = 20 * time.Millisecond
		gap     = 15 * time.Millisecond
	)
	cls := classes()
	bound := max(time.Duration(cls[2].Priority-cls[0].Priority+1)*aging, cls[2].TTFT-cls[0].TTFT)
	m := machine(t, p, scheduler.PoolConfig{MaxInflight: 1, Aging: aging})
	now := t0
	var running scheduler.Ticket
	var runEnd time.Time
	hiArr := t0
	loArr := t0.Add(time.Millisecond)
	lo, err := m.Arrive(loArr, scheduler.Request{Class: "batch"})
	if err != nil {
		t.Fatal(err)
	}
	arrival := map[scheduler.Ticket]time.Time{}
	for now.Sub(t0) < 10*time.Second {
		// The next event: an interactive arrival or the running request's end.
		if running != 0 && !runEnd.After(hiArr) {
			now = runEnd
			m.Finish(now, running, scheduler.Done)
			running = 0
		} else {
			now = hiArr
			tk, err := m.Arrive(now, scheduler.Request{Class: "interactive"})
			if err != nil {
				t.Fatal(err)
			}
			arrival[tk] = now
			hiArr = hiArr.Add(gap)
		}
		d := m.Step(now)
		for _, tk := range d.Admitted {
			if tk == lo {
				t.Logf("batch request admitted after %v (bound on overtaking arrivals %v)", now.Sub(loArr), bound)
				return
			}
			if late := arrival[tk].Sub(loArr); late > bound {
				t.Fatalf("a request arriving %v after the batch request overtook it (bound %v)", late, bound)
			}
			running, runEnd = tk, now.Add(service)
		}
	}
	t.Fatalf("batch request starved for 10s under %s", p.Name())
}

// victimContract: Victim keeps the promises the Machine's index of possible
// victims rests on (scheduler.Preemptor): an answer that depends on the
// class and priority only and, once false, stays false for every less
// urgent priority; and no class that is not Preemptible is ever a victim.
func victimContract(t *testing.T, pre scheduler.Preemptor) {
	cls := append(classes(), scheduler.ClassConfig{Name: "bulk", Priority: 20, Preemptible: true})
	for _, c := range cls {
		was := true
		for above := -2; above <= 25; above++ {
			got := pre.Victim(&c, above)
			if again := pre.Victim(&c, above); again != got {
				t.Fatalf("Victim(%s, %d) = %v, then %v", c.Name, above, got, again)
			}
			if got && !was {
				t.Fatalf("Victim(%s, %d) true after false for a more urgent priority", c.Name, above)
			}
			if got && !c.Preemptible {
				t.Fatalf("Victim(%s, %d): a class that is not preemptible", c.Name, above)
			}
			was = got
		}
	}
}

// rescuesAtRisk: with the pool full of batch requests far from finishing
// (their predicted finish is past the interactive objective), an
// interactive request is at risk at once and gets a slot through one
// preemption. Every Preemptor must rescue this plain case, or it does not
// preempt at all.
func rescuesAtRisk(t *testing.T, p scheduler.Policy) {
	rails := scheduler.PreemptionConfig{MinLowerInflight: 1, MaxPerRequest: 1}
	m := machine(t, p, scheduler.PoolConfig{MaxInflight: 2, Preemption: rails})
	now := t0
	var batch []scheduler.Ticket
	for range 2 {
		tk, err := m.Arrive(now, scheduler.Request{Class: "batch", MaxTokens: 10_000})
		if err != nil {
			t.Fatal(err)
		}
		batch = append(batch, tk)
	}
	if d := m.Step(now); len(d.Admitted) != 2 {
		t.Fatalf("admitted %v, want both batch requests", d.Admitted)
	}
	now = now.Add(time.Second)
	urgent, err := m.Arrive(now, scheduler.Request{Class: "interactive"})
	if err != nil {
		t.Fatal(err)
	}
	d := m.Step(now)
	if len(d.Preempted) != 1 || !slices.Contains(batch, d.Preempted[0]) {
		t.Fatalf("preempted %v, want one of the batch requests %v", d.Preempted, batch)
	}
	m.Finish(now, d.Preempted[0], scheduler.Preempted)
	if d = m.Step(now); !slices.Equal(d.Admitted, []scheduler.Ticket{urgent}) {
		t.Fatalf("admitted %v once the victim finished, want the interactive request %d", d.Admitted, urgent)
	}
}
