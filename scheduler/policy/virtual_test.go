package policy_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/policy"
	"github.com/llmesh/llmesh/sim"
)

// This file drives the scheduler machine and the simulated engine model
// together in virtual time (a small discrete-event loop): the scheduler
// admits into a pool in front of one llama3-8b H200 engine, preempted
// requests are aborted in the engine and requeued (restarting from
// scratch), and per-class TTFT is recorded. It checks that policies do what
// they are for under load, deterministically.

type vtClass struct {
	name           string
	share          float64
	prompt, output int
}

type vtResult struct {
	ttft        map[string][]time.Duration
	done        map[string]int
	outTokens   map[string]int
	recomputed  int
	computed    int
	generated   int
	preemptions int
	span        time.Duration
}

func (r vtResult) p(class string, q float64) time.Duration {
	s := slices.Clone(r.ttft[class])
	if len(s) == 0 {
		return 0
	}
	slices.Sort(s)
	return s[min(len(s)-1, int(math.Ceil(q*float64(len(s))))-1)]
}

func vtConfig(p scheduler.Policy, limit int, target float64) scheduler.Config {
	return scheduler.Config{
		Pools: []scheduler.PoolConfig{{Name: "gpu", MaxInflight: limit, Policy: p, Aging: 30 * time.Second,
			Preemption: scheduler.PreemptionConfig{MinLowerInflight: 1, MaxPerRequest: 2, Target: target}}},
		Classes: []scheduler.ClassConfig{
			{Name: "interactive", Priority: 0, TTFT: 300 * time.Millisecond, TPOT: 30 * time.Millisecond},
			{Name: "batch", Priority: 10, TTFT: 10 * time.Second, TPOT: 100 * time.Millisecond, Preemptible: true},
		},
	}
}

// simulate runs n requests arriving as a Poisson process of rate per
// second.
func simulate(t testing.TB, cfg scheduler.Config, classes []vtClass, rate float64, n int, seed uint64) vtResult {
	t.Helper()
	prof, err := sim.LookupProfile(sim.DefaultProfile)
	if err != nil {
		t.Fatal(err)
	}
	eng, err := sim.NewEngine(prof, sim.Config{MaxNumSeqs: 256})
	if err != nil {
		t.Fatal(err)
	}
	m, err := scheduler.NewMachine(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(seed, 99))
	type vreq struct {
		r        scheduler.Request
		class    string
		output   int
		gotTTFT  bool
		computed int
	}
	byTicket := map[scheduler.Ticket]*vreq{}
	start := time.Unix(1_800_000_000, 0)
	now := start
	nextArr := start
	arrived, finished := 0, 0
	res := vtResult{ttft: map[string][]time.Duration{}, done: map[string]int{}, outTokens: map[string]int{}}
	var stepEnd time.Time
	var events []sim.Event
	stepping := false
	var wake time.Time
	arrive := func(v *vreq) {
		tk, err := m.Arrive(now, v.r)
		if err != nil {
			t.Fatalf("arrive: %v", err)
		}
		byTicket[tk] = v
	}
	for finished < n {
		// The next event time.
		next := time.Time{}
		pick := func(x time.Time) {
			if !x.IsZero() && (next.IsZero() || x.Before(next)) {
				next = x
			}
		}
		if arrived < n {
			pick(nextArr)
		}
		if stepping {
			pick(stepEnd)
		}
		pick(wake)
		if next.IsZero() {
			t.Fatalf("stuck: %d of %d finished", finished, n)
		}
		now = next
		if stepping && !stepEnd.After(now) {
			stepping = false
			for _, ev := range events {
				tk := scheduler.Ticket(ev.ID)
				v := byTicket[tk]
				if v == nil {
					continue // aborted after this step was scheduled
				}
				v.computed += int(ev.Scheduled)
				res.computed += int(ev.Scheduled)
				if ev.Flags.Has(sim.EvToken) {
					res.generated++
					if !v.gotTTFT {
						v.gotTTFT = true
						res.ttft[v.class] = append(res.ttft[v.class], now.Sub(v.r.Arrival))
					}
					m.Progress(now, tk, scheduler.Progress{FirstToken: true, Tokens: int(ev.Output)})
				}
				if ev.Flags.Has(sim.EvFinished) {
					m.Finish(now, tk, scheduler.Done)
					delete(byTicket, tk)
					finished++
					res.done[v.class]++
					res.outTokens[v.class] += v.output
				}
			}
		}
		for arrived < n && !nextArr.After(now) {
			c := classes[len(classes)-1]
			u := rng.Float64()
			for _, cl := range classes {
				if u < cl.share {
					c = cl
					break
				}
				u -= cl.share
			}
			prompt := max(16, int(float64(c.prompt)*(0.5+rng.Float64())))
			output := max(2, int(float64(c.output)*(0.5+rng.Float64())))
			arrived++
			arrive(&vreq{r: scheduler.Request{ID: string(rune(arrived)), Class: c.name, PromptTokens: prompt, MaxTokens: output, Arrival: nextArr}, class: c.name, output: output})
			nextArr = nextArr.Add(time.Duration(rng.ExpFloat64() / rate * float64(time.Second)))
		}
		for {
			d := m.Step(now)
			wake = d.Wake
			for _, tk := range d.Admitted {
				v := byTicket[tk]
				if err := eng.Add(sim.SeqSpec{ID: uint64(tk), PromptTokens: v.r.PromptTokens, MaxTokens: v.r.MaxTokens}); err != nil {
					t.Fatalf("engine add: %v", err)
				}
			}
			if len(d.Rejected) > 0 {
				t.Fatalf("rejected: %v", d.Rejected[0].Err)
			}
			if len(d.Preempted) == 0 {
				break
			}
			for _, tk := range d.Preempted {
				v := byTicket[tk]
				eng.Abort(uint64(tk))
				m.Finish(now, tk, scheduler.Preempted)
				delete(byTicket, tk)
				res.preemptions++
				// Restart from scratch: what it had computed is recomputed.
				res.recomputed += v.computed
				rq := *v
				rq.computed = 0
				rq.r.Requeue = true
				arrive(&rq)
			}
		}
		if !stepping && !eng.Idle() {
			r := eng.Step(now)
			events = append(events[:0], r.Events...)
			stepEnd, stepping = r.End(), true
		}
	}
	res.span = now.Sub(start)
	return res
}

var mixed = []vtClass{
	{name: "interactive", share: 0.2, prompt: 600, output: 150},
	{name: "batch", share: 0.8, prompt: 1500, output: 400},
}

// TestVirtualTimePolicies runs the mixed workload (20 % interactive, 80 %
// batch) unloaded and at about the pool's saturation rate under every
// policy and checks what each policy is for. Virtual time makes the numbers
// exact and repeatable, so these are comparisons, not timing guesses.
func TestVirtualTimePolicies(t *testing.T) {
	const limit = 32
	const n = 400
	run := func(name string, rate, target float64) vtResult {
		p, err := policy.Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		r := simulate(t, vtConfig(p, limit, target), mixed, rate, n, 1)
		t.Logf("rate %4.1f %-10s target %.2f: interactive TTFT p50 %6v p99 %7v | batch TTFT p99 %7v | batch %6.0f tok/s | %d preemptions, %.2f%% recomputed",
			rate, name, target, r.p("interactive", 0.5).Round(time.Millisecond), r.p("interactive", 0.99).Round(time.Millisecond),
			r.p("batch", 0.99).Round(time.Millisecond), r.batchRate(), r.preemptions, 100*r.recomputedShare())
		return r
	}
	idle := map[string]vtResult{}
	for _, name := range policy.Names() {
		idle[name] = run(name, 2, 1)
		if idle[name].preemptions != 0 {
			t.Errorf("%s preempted in an unloaded pool", name)
		}
	}
	base := idle["fifo"].p("interactive", 0.99)

	const rate = 9 // about the pool's saturation request rate for this mix
	fifoR, prioR, edfR := run("fifo", rate, 1), run("priority", rate, 1), run("edf", rate, 1)
	pre, preTight := run("preemptive", rate, 1), run("preemptive", rate, 0.5)
	for name, r := range map[string]vtResult{"fifo": fifoR, "priority": prioR, "edf": edfR} {
		if r.preemptions != 0 {
			t.Errorf("%s preempted", name)
		}
	}
	if fifoR.p("interactive", 0.99) < 10*base {
		t.Errorf("saturation run is not loaded: fifo interactive p99 %v, unloaded %v", fifoR.p("interactive", 0.99), base)
	}
	if got := prioR.p("interactive", 0.99); got > fifoR.p("interactive", 0.99)/10 {
		t.Errorf("priority interactive p99 %v, not far below fifo's %v", got, fifoR.p("interactive", 0.99))
	}
	if got := pre.p("interactive", 0.99); got > 300*time.Millisecond || got >= prioR.p("interactive", 0.99) {
		t.Errorf("preemptive interactive p99 %v: want within the 300ms objective and below priority's %v", got, prioR.p("interactive", 0.99))
	}
	if got := preTight.p("interactive", 0.99); got > pre.p("interactive", 0.99) {
		t.Errorf("target 0.5 p99 %v above target 1's %v", got, pre.p("interactive", 0.99))
	}
	best := max(fifoR.batchRate(), prioR.batchRate(), edfR.batchRate())
	for _, r := range []vtResult{pre, preTight} {
		if r.preemptions == 0 || r.batchRate() < 0.95*best || r.recomputedShare() > 0.10 {
			t.Errorf("preemption cost: %d preemptions, batch %.0f tok/s (best non-preemptive %.0f), %.2f%% recomputed",
				r.preemptions, r.batchRate(), best, 100*r.recomputedShare())
		}
	}
}

func (r vtResult) batchRate() float64 { return float64(r.outTokens["batch"]) / r.span.Seconds() }

func (r vtResult) recomputedShare() float64 {
	return float64(r.recomputed) / float64(max(1, r.computed))
}

// BenchmarkVirtualTime is the cost of simulating one request of the mixed
// workload at saturation (scheduler machine + engine model), per policy:
// what a virtual-time evaluation pays per request of a trace.
func BenchmarkVirtualTime(b *testing.B) {
	for _, p := range policy.All() {
		b.Run(p.Name(), func(b *testing.B) {
			const n = 1000
			for i := 0; i < b.N; i++ {
				simulate(b, vtConfig(p, 32, 1), mixed, 9, n, uint64(i))
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/request")
		})
	}
}
