package scheduler

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// slotWaitByWalk is the slot wait as a pass over every running request.
func slotWaitByWalk(m *Machine, now time.Time, p *pool) time.Duration {
	if p.inflight-p.preempting <= 0 {
		return 0
	}
	w := forever
	for _, r := range p.running {
		if !r.preempting {
			w = min(w, m.remaining(now, p, r))
		}
	}
	return w
}

// victimBoundByWalk is the walk's bound on victims as a pass over every
// running request.
func victimBoundByWalk(m *Machine, p *pool) (n, worst int) {
	for _, r := range p.running {
		if !r.preempting && r.class.Preemptible && r.preempts < p.Preemption.MaxPerRequest && r.Priority > m.top {
			n++
			worst = max(worst, r.Priority)
		}
	}
	return n, worst
}

// victimsByWalk is the victim search as a pass over every running
// request: the victims (by ticket), how many MinLowerInflight allows and
// when the first protected one becomes eligible.
func victimsByWalk(now time.Time, p *pool, above int) ([]Ticket, int, time.Time) {
	var vs []Ticket
	var wake time.Time
	lower := 0
	for _, r := range p.running {
		if r.preempting || r.Priority <= above {
			continue
		}
		lower++
		if !r.class.Preemptible || r.preempts >= p.Preemption.MaxPerRequest {
			continue
		}
		if ok := r.admitted.Add(p.Preemption.MinRunTime); ok.After(now) {
			if wake.IsZero() || ok.Before(wake) {
				wake = ok
			}
			continue
		}
		vs = append(vs, r.ticket)
	}
	slices.Sort(vs)
	return vs, max(0, lower-max(1, p.Preemption.MinLowerInflight)+1), wake
}

// TestSlotIndexIsTheWalk drives a machine through random events (arrivals
// with and without max tokens, progress by one token and by many, a first
// token without tokens, finishes, cancels of waiting and running requests,
// preemptions acted on late, time passing) and requires the index's slot
// wait, victim bound and victim search to be the walk's after every one,
// before and after the pool's decode speed is known.
func TestSlotIndexIsTheWalk(t *testing.T) {
	for seed := range uint64(12) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 11))
			cfg := fleetConfig(1+int(seed%3), 6, time.Duration(seed%2)*50*time.Millisecond)
			cfg.Pools[0].Preemption.MaxPerRequest = 1 + int(seed%2)
			cfg.Pools[0].Preemption.MinLowerInflight = int(seed % 3)
			m, err := NewMachine(cfg)
			if err != nil {
				t.Fatal(err)
			}
			p := m.pools[0]
			now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			tokens := map[Ticket]int{}
			var running, stopping, arrived []Ticket
			classes := []string{"premium", "standard", "bulk", "bulk"}
			check := func(i int, what string) {
				t.Helper()
				if got, want := m.slotWait(now, p), slotWaitByWalk(m, now, p); got != want {
					t.Fatalf("event %d (%s): slot wait %v, the walk %v", i, what, got, want)
				}
				n, worst := 0, 0
				for ci, k := range p.run.under {
					if cl := m.classes[ci]; k > 0 && cl.Preemptible && cl.Priority > m.top {
						n += k
						worst = max(worst, cl.Priority)
					}
				}
				if wn, ww := victimBoundByWalk(m, p); n != wn || worst != ww {
					t.Fatalf("event %d (%s): victims %d (worst %d), the walk %d (%d)", i, what, n, worst, wn, ww)
				}
				for _, above := range []int{m.top - 1, 0, 1, 2, 5, 10, 100} {
					vs, allowed, wake := m.victims(now, p, above)
					got := make([]Ticket, 0, len(vs))
					for _, v := range vs {
						got = append(got, v.e.ticket)
					}
					slices.Sort(got)
					want, wantAllowed, wantWake := victimsByWalk(now, p, above)
					if !slices.Equal(got, want) || allowed != wantAllowed || !wake.Equal(wantWake) {
						t.Fatalf("event %d (%s), above %d: victims %v, %d allowed, wake %v; the walk %v, %d, %v",
							i, what, above, got, allowed, wake, want, wantAllowed, wantWake)
					}
				}
			}
			checked := 0
			for i := range 4000 {
				what := ""
				switch k := rng.IntN(12); {
				case k < 4:
					what = "arrive"
					req := Request{ID: fmt.Sprint(rng.IntN(50)), Class: classes[rng.IntN(len(classes))], PromptTokens: rng.IntN(2000), MaxTokens: rng.IntN(300)}
					if rng.IntN(8) == 0 {
						req.MaxTokens = 0
					}
					tk, err := m.Arrive(now, req)
					if err != nil {
						t.Fatal(err)
					}
					arrived = append(arrived, tk)
				case k < 8 && len(running) > 0:
					what = "progress"
					tk := running[rng.IntN(len(running))]
					switch rng.IntN(4) {
					case 0:
						m.Progress(now, tk, Progress{FirstToken: true})
					case 1:
						tokens[tk] += 1 + rng.IntN(40)
						m.Progress(now, tk, Progress{FirstToken: true, Tokens: tokens[tk]})
					default:
						tokens[tk]++
						m.Progress(now, tk, Progress{Tokens: tokens[tk]})
					}
				case k < 10 && len(running) > 0:
					what = "finish"
					j := rng.IntN(len(running))
					m.Finish(now, running[j], Done)
					running = slices.Delete(running, j, j+1)
				case k == 10 && len(arrived) > 0 && rng.IntN(2) == 0:
					// A client gives up: waiting, running, or long gone.
					what = "cancel"
					tk := arrived[rng.IntN(len(arrived))]
					m.Cancel(now, tk)
					running = slices.DeleteFunc(running, func(x Ticket) bool { return x == tk })
				case k == 10 && len(stopping) > 0:
					what = "preempted"
					m.Finish(now, stopping[0], Preempted)
					stopping = stopping[1:]
				default:
					what = "time"
					now = now.Add(time.Duration(rng.IntN(int(200 * time.Millisecond))))
				}
				check(i, what)
				d := m.Step(now)
				running = append(running, d.Admitted...)
				for _, v := range d.Preempted {
					running = slices.DeleteFunc(running, func(x Ticket) bool { return x == v })
					stopping = append(stopping, v)
				}
				check(i, what+", step")
				if p.tpot.known {
					checked++
				}
			}
			if checked == 0 {
				t.Fatal("the decode speed never became known")
			}
		})
	}
}
