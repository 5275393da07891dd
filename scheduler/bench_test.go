package scheduler_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/llmesh/llmesh/kvblock"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/policy/fifo"
	"github.com/llmesh/llmesh/scheduler/policy/preemptive"
)

// BenchmarkMachineRequest is the cost of one request's whole life in the
// pure machine (arrive, step, first token, progress, finish, step) with a
// pool of 256 kept full and a standing queue, as a virtual-time simulation
// drives it.
func BenchmarkMachineRequest(b *testing.B) {
	for _, p := range []scheduler.Policy{fifo.New(), preemptive.New()} {
		b.Run(p.Name(), func(b *testing.B) {
			machineRequest(b, scheduler.PoolConfig{Name: "p", MaxInflight: 256, Policy: p, Aging: time.Second, Preemption: rails}, nil)
		})
	}
}

// BenchmarkMachineRequestEndpoints is BenchmarkMachineRequest with the
// pool's 256 slots on 8 endpoints of 32: the picker's and the endpoint
// victim search's cost.
func BenchmarkMachineRequestEndpoints(b *testing.B) {
	var eps []scheduler.EndpointConfig
	for i := 0; i < 8; i++ {
		eps = append(eps, scheduler.EndpointConfig{Name: fmt.Sprintf("10.0.0.%d:8000", i), MaxInflight: 32})
	}
	for _, p := range []scheduler.Policy{fifo.New(), preemptive.New()} {
		b.Run(p.Name(), func(b *testing.B) {
			machineRequest(b, scheduler.PoolConfig{Name: "p", MaxInflight: 256, Policy: p, Aging: time.Second, Preemption: rails,
				Endpoints: eps}, nil)
		})
	}
}

// BenchmarkMachineRequestPrefix is BenchmarkMachineRequestEndpoints with
// prefix routing: every request carries 750 prompt blocks (a 12,000-token
// prompt, the Mooncake conversation trace's mean), one of 64
// conversations' prompts, so the index matches, records and evicts.
func BenchmarkMachineRequestPrefix(b *testing.B) {
	var eps []scheduler.EndpointConfig
	for i := 0; i < 8; i++ {
		eps = append(eps, scheduler.EndpointConfig{Name: fmt.Sprintf("10.0.0.%d:8000", i), MaxInflight: 32})
	}
	prompts := make([][]kvblock.Hash, 64)
	for i := range prompts {
		prompts[i] = promptBlocks(uint32(i), 750)
	}
	blocks := func(i int) []kvblock.Hash { return prompts[i%len(prompts)] }
	for _, p := range []scheduler.Policy{fifo.New(), preemptive.New()} {
		b.Run(p.Name(), func(b *testing.B) {
			machineRequest(b, scheduler.PoolConfig{Name: "p", MaxInflight: 256, Policy: p, Aging: time.Second, Preemption: rails,
				Endpoints: eps, PrefixRouting: scheduler.PrefixRouting{Weight: 1, CapacityBlocks: 10000}}, blocks)
		})
	}
}

// machineRequest drives pc's machine; blocks, when non-nil, gives the i-th
// request's prompt blocks.
func machineRequest(b *testing.B, pc scheduler.PoolConfig, blocks func(i int) []kvblock.Hash) {
	m, err := scheduler.NewMachine(scheduler.Config{Pools: []scheduler.PoolConfig{pc}, Classes: twoClasses()})
	if err != nil {
		b.Fatal(err)
	}
	now := t0
	var running []scheduler.Ticket
	cls := []string{"batch", "batch", "batch", "batch", "interactive"}
	req := func(i int) scheduler.Request {
		r := scheduler.Request{Class: cls[i%5], MaxTokens: 200}
		if blocks != nil {
			r.Blocks = blocks(i)
		}
		return r
	}
	for i := 0; i < 512; i++ {
		if _, err := m.Arrive(now, req(i)); err != nil {
			b.Fatal(err)
		}
	}
	running = append(running, m.Step(now).Admitted...)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		now = now.Add(time.Millisecond)
		if _, err := m.Arrive(now, req(i)); err != nil {
			b.Fatal(err)
		}
		tk := running[0]
		running = running[1:]
		m.Progress(now, tk, scheduler.Progress{FirstToken: true, Tokens: 1})
		m.Progress(now, tk, scheduler.Progress{FirstToken: true, Tokens: 100})
		m.Finish(now, tk, scheduler.Done)
		d := m.Step(now)
		running = append(running, d.Admitted...)
		for _, v := range d.Preempted {
			m.Finish(now, v, scheduler.Preempted)
		}
		if len(d.Preempted) > 0 {
			running = append(running, m.Step(now).Admitted...)
		}
		if len(running) == 0 {
			b.Fatal("pool drained")
		}
	}
}

// BenchmarkSchedulerAdmitRelease is one uncontended admission and release
// through the in-process runtime (what a host pays per request).
func BenchmarkSchedulerAdmitRelease(b *testing.B) {
	s, err := scheduler.New(scheduler.Config{
		Pools:   []scheduler.PoolConfig{{Name: "p", MaxInflight: 64, Policy: fifo.New()}},
		Classes: twoClasses(),
	}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			l, err := s.Admit(ctx, scheduler.Request{Class: "interactive"})
			if err != nil {
				b.Error(err)
				return
			}
			l.Progress(scheduler.Progress{FirstToken: true, Tokens: 1})
			l.Release(scheduler.Done)
		}
	})
}
