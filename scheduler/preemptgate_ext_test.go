package scheduler_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/policy/preemptive"
)

// TestPreemptGateDecidesTheSame drives a gated and an ungated machine,
// under the registered preemptive policy and under a plain Preemptor,
// through the same random events (arrivals, first tokens, finishes,
// preemptions acted on, time passing by less and more than min_run_time,
// now and then stepping back) and requires the same decisions at every step: the guard only skips
// walks that decide nothing.
func TestPreemptGateDecidesTheSame(t *testing.T) {
	for _, pol := range []scheduler.Policy{preemptive.New(), scheduler.PlainPreemptor} {
		for seed := range uint64(20) {
			t.Run(fmt.Sprintf("%s/%d", pol.Name(), seed), func(t *testing.T) { gateDecidesTheSame(t, pol, seed) })
		}
	}
}

func gateDecidesTheSame(t *testing.T, pol scheduler.Policy, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 7))
	minRun := []time.Duration{0, 50 * time.Millisecond, 200 * time.Millisecond}[seed%3]
	cfg := scheduler.FleetConfig(1+int(seed%4), 4, minRun)
	cfg.Pools[0].Policy = pol
	gated, err := scheduler.NewMachine(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ungated, _ := scheduler.NewMachine(cfg)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var running []scheduler.Ticket
	preempted := 0
	classes := []string{"premium", "standard", "bulk", "bulk"}
	for i := range 3000 {
		switch k := rng.IntN(10); {
		case k < 5:
			req := scheduler.Request{Class: classes[rng.IntN(len(classes))], PromptTokens: 64 + rng.IntN(2000), MaxTokens: 16 + rng.IntN(500)}
			t1, err1 := gated.Arrive(now, req)
			t2, err2 := ungated.Arrive(now, req)
			if t1 != t2 || (err1 == nil) != (err2 == nil) {
				t.Fatalf("event %d: Arrive = %v, %v and %v, %v", i, t1, err1, t2, err2)
			}
		case k < 7 && len(running) > 0:
			tk := running[rng.IntN(len(running))]
			pr := scheduler.Progress{FirstToken: true, Tokens: 1 + rng.IntN(50)}
			gated.Progress(now, tk, pr)
			ungated.Progress(now, tk, pr)
		case k < 9 && len(running) > 0:
			j := rng.IntN(len(running))
			tk := running[j]
			running = slices.Delete(running, j, j+1)
			gated.Finish(now, tk, scheduler.Done)
			ungated.Finish(now, tk, scheduler.Done)
		case k == 9 && rng.IntN(3) == 0:
			// A clock that steps back: admissions out of order.
			now = now.Add(-time.Duration(rng.IntN(int(100 * time.Millisecond))))
		default:
			now = now.Add(time.Duration(rng.IntN(int(300 * time.Millisecond))))
		}
		now = now.Add(time.Duration(rng.IntN(int(2 * time.Millisecond))))
		d1, d2 := gated.Step(now), scheduler.StepUngated(ungated, now)
		if !slices.Equal(d1.Admitted, d2.Admitted) || !slices.Equal(d1.Preempted, d2.Preempted) || len(d1.Rejected) != len(d2.Rejected) {
			t.Fatalf("event %d: gated decided %+v, ungated %+v", i, d1, d2)
		}
		running = append(running, d1.Admitted...)
		for _, v := range d1.Preempted {
			preempted++
			running = slices.DeleteFunc(running, func(x scheduler.Ticket) bool { return x == v })
			gated.Finish(now, v, scheduler.Preempted)
			ungated.Finish(now, v, scheduler.Preempted)
		}
	}
	t.Logf("%d preemptions", preempted)
}
