package scheduler_test

import (
	"testing"
	"time"

	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/policy/edf"
	"github.com/llmesh/llmesh/scheduler/policy/fifo"
	"github.com/llmesh/llmesh/scheduler/policy/preemptive"
	"github.com/llmesh/llmesh/scheduler/policy/priority"
)

// FuzzMachine reads bytes as a sequence of events with arbitrary values
// (token counts, times, tickets) and checks that the machine never panics,
// never admits past its limits, and leaks nothing once drained.
func FuzzMachine(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11})
	f.Add([]byte{0, 200, 0, 1, 0, 0, 9, 9, 9, 3, 3, 3, 1, 1})
	f.Add([]byte{7, 255, 255, 255, 0, 1, 0, 2, 0, 3, 5, 5, 6, 2})
	policies := []scheduler.Policy{fifo.New(), priority.New(), preemptive.New(), edf.New()}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 2 {
			return
		}
		classes := twoClasses()
		classes[0].MaxQueue, classes[1].MaxWait = 4, time.Duration(data[1])*time.Millisecond
		pc := scheduler.PoolConfig{Name: "p", MaxInflight: 1 + int(data[0]%4), MaxInflightTokens: int(data[1]) * 8,
			Policy: policies[int(data[0]/4)%len(policies)], BatchWindow: time.Duration(data[0]%3) * time.Millisecond,
			Aging: time.Duration(data[1]%5) * time.Millisecond, Preemption: scheduler.PreemptionConfig{MaxPerRequest: int(data[0] % 3)},
			MaxPrefillTokens: int(data[1]%4) * 100, ReserveUrgent: int(data[1] / 64)}
		prefix := data[0]%2 == 1
		if prefix {
			// Two endpoints that remember few blocks, so that the prefix
			// index evicts.
			pc.Endpoints = []scheduler.EndpointConfig{{Name: "a"}, {Name: "b"}}
			pc.PrefixRouting = scheduler.PrefixRouting{Weight: float64(data[1]%3) + 0.5, CapacityBlocks: 1 + int(data[1]%5)}
		}
		m, err := scheduler.NewMachine(scheduler.Config{Pools: []scheduler.PoolConfig{pc}, Classes: classes})
		if err != nil {
			t.Fatal(err)
		}
		now := t0
		var live []scheduler.Ticket
		next := func(i *int) int {
			if *i >= len(data) {
				return 0
			}
			*i++
			return int(data[*i-1])
		}
		for i := 2; i < len(data); {
			op := next(&i)
			arg := next(&i)
			var tk scheduler.Ticket
			if len(live) > 0 {
				tk = live[arg%len(live)]
			}
			switch op % 8 {
			case 0, 1:
				r := scheduler.Request{ID: string(rune('a' + arg%7)), Class: []string{"interactive", "batch", "x"}[arg%3],
					PromptTokens: arg * (1 + op), MaxTokens: arg << (op % 24), Requeue: op%5 == 0, Arrival: now.Add(-time.Duration(arg) * time.Millisecond)}
				if prefix {
					r.Blocks = promptBlocks(uint32(arg%3), arg%6)
				}
				if t, err := m.Arrive(now, r); err == nil {
					live = append(live, t)
				}
			case 2:
				m.Progress(now, tk, scheduler.Progress{FirstToken: arg%2 == 0, Tokens: arg})
			case 3:
				m.Finish(now, tk, scheduler.Outcome(arg%4))
			case 4:
				m.Cancel(now, tk)
			case 5:
				_ = m.SetLimit("p", arg-3)
			default:
				now = now.Add(time.Duration(arg) * time.Millisecond)
			}
			d := m.Step(now)
			for _, v := range d.Preempted {
				if arg%2 == 0 {
					m.Finish(now, v, scheduler.Preempted)
				}
			}
			s := m.Stats()[0]
			for _, e := range s.Endpoints {
				if e.InFlight > e.Limit && len(d.Admitted) > 0 || e.PrefixMatched > e.PrefixBlocks {
					t.Fatalf("endpoint %+v", e)
				}
			}
			if len(d.Admitted) > 0 && (s.InFlight > s.Limit || (pc.MaxInflightTokens > 0 && s.InFlightTokens > pc.MaxInflightTokens)) {
				t.Fatalf("admitted past limits: %+v", s)
			}
			if !d.Wake.IsZero() && d.Wake.Before(now) {
				t.Fatalf("wake %v before now %v", d.Wake, now)
			}
		}
		for _, tk := range live {
			m.Finish(now, tk, scheduler.Done)
		}
		m.Step(now)
		if s := m.Stats()[0]; s.InFlight != 0 || s.InFlightTokens != 0 || s.PrefillTokens != 0 || s.Preempting != 0 {
			t.Fatalf("leak after drain: %+v", s)
		}
	})
}
