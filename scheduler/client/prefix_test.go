package client_test

import (
	"context"
	"testing"

	"github.com/llmesh/llmesh/kvblock"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/client"
	"github.com/llmesh/llmesh/scheduler/policy/fifo"
)

func blocksOf(seed uint32, n int) []kvblock.Hash {
	toks := make([]uint32, n*kvblock.DefaultBlockSize)
	for i := range toks {
		toks[i] = seed<<16 + uint32(i)
	}
	return kvblock.Chain(nil, 0, toks, kvblock.DefaultBlockSize)
}

// TestPrefixBlocksOverTheWire: a remote client's prompt blocks reach the
// service's picker, over each transport. Two prompts are held on the two
// endpoints (one each, so the load ties); a repeat of the second prompt
// can only go to the second endpoint if its blocks crossed the wire
// (without them the tie goes to the first).
func TestPrefixBlocksOverTheWire(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts client.Options
	}{
		{"grpc session", client.Options{Transport: client.TransportGRPC}},
		{"framed session", client.Options{Transport: client.TransportFramed}},
		{"admit streams", client.Options{StreamPerAdmission: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config(8, fifo.New())
			cfg.Pools[0].Endpoints = []scheduler.EndpointConfig{{Name: "10.0.0.1:8000", MaxInflight: 4}, {Name: "10.0.0.2:8000", MaxInflight: 4}}
			cfg.Pools[0].PrefixRouting = scheduler.PrefixRouting{Weight: 1, CapacityBlocks: 1000}
			svc := startService(t, "127.0.0.1:0", cfg)
			c := newClient(t, svc.addr, tc.opts)
			ctx := context.Background()
			x, y := blocksOf(1, 40), blocksOf(2, 40)
			admit := func(blocks []kvblock.Hash) (scheduler.Lease, string) {
				t.Helper()
				l, err := c.Admit(ctx, scheduler.Request{Class: "batch", PromptTokens: 640, Blocks: blocks})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { l.Release(scheduler.Done) })
				return l, scheduler.EndpointOf(l)
			}
			_, ex := admit(x)
			_, ey := admit(y)
			if ex != "10.0.0.1:8000" || ey != "10.0.0.2:8000" {
				t.Fatalf("new prompts on %s and %s, want the first, then the less loaded second", ex, ey)
			}
			if _, again := admit(y); again != ey {
				t.Errorf("repeated prompt on %s, want %s where it went before", again, ey)
			}
			if _, again := admit(x); again != ex {
				t.Errorf("repeated first prompt on %s, want %s", again, ex)
			}
			var matched uint64
			for _, e := range svc.sched.Stats()[0].Endpoints {
				matched += e.PrefixMatched
			}
			if matched != 80 {
				t.Errorf("the service's picker matched %d blocks, want 80 (two repeats of 40)", matched)
			}
		})
	}
}
