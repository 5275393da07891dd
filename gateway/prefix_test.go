package gateway

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/policy"
	"github.com/llmesh/llmesh/sim/simtest"
)

// TestEndpointsPrefixRouting: in a pool that routes by prefix, a chat's
// next turn goes to the sim that served the turn before, even when the
// other sim is as idle and comes first in the pool (where a pool without
// the rule sends it).
func TestEndpointsPrefixRouting(t *testing.T) {
	for _, prefix := range []bool{true, false} {
		sims := [2]*simtest.Sim{simtest.Start(t), simtest.Start(t)}
		eps := []string{strings.TrimPrefix(sims[0].HTTPURL, "http://"), strings.TrimPrefix(sims[1].HTTPURL, "http://")}
		fifo, err := policy.Lookup("fifo")
		if err != nil {
			t.Fatal(err)
		}
		pc := scheduler.PoolConfig{Name: "sim", MaxInflight: 4, Policy: fifo,
			Endpoints: []scheduler.EndpointConfig{{Name: eps[0], MaxInflight: 1}, {Name: eps[1], MaxInflight: 1}}}
		if prefix {
			pc.PrefixRouting = scheduler.PrefixRouting{Weight: 1, CapacityBlocks: 10000}
		}
		sched, err := scheduler.New(scheduler.Config{Pools: []scheduler.PoolConfig{pc}, Classes: []scheduler.ClassConfig{{Name: "default"}}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sched.Close() })
		rec := &recorder{ch: make(chan Record, 16)}
		_, gw := startGateway(t, Config{Pools: []Pool{{Name: "sim", Upstream: sims[0].HTTPURL, Endpoints: eps, PrefixRouting: prefix}}},
			WithAdmitter(sched), WithRecorder(rec))

		// A long stream holds the first sim's only slot...
		ctx, cancel := context.WithCancel(context.Background())
		long := post(t, ctx, gw+"/v1/completions", completion(sims[0].Model, 5000))
		// ...so the conversation's first turn goes to the second.
		sys := strings.Repeat("You are a careful assistant. ", 30)
		turn := func(msgs string) string {
			res := post(t, context.Background(), gw+"/v1/chat/completions",
				`{"model":"`+sims[0].Model+`","max_tokens":4,"messages":[{"role":"system","content":"`+sys+`"}`+msgs+`]}`)
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusOK {
				t.Fatalf("status %d", res.StatusCode)
			}
			return rec.next(t).Endpoint // the long stream is still running
		}
		first := turn(`,{"role":"user","content":"first question"}`)
		if first != eps[1] {
			t.Fatalf("first turn went to %s while %s was full", first, eps[0])
		}
		cancel()
		long.Body.Close()
		if r := rec.next(t); r.Endpoint != eps[0] {
			t.Fatalf("the long stream's record names %s", r.Endpoint)
		}
		// Both sims idle now: the next turn follows its prefix, or the
		// pool's order without the rule.
		second := turn(`,{"role":"user","content":"first question"},{"role":"assistant","content":"an answer"},{"role":"user","content":"second"}`)
		want := eps[1]
		if !prefix {
			want = eps[0]
		}
		if second != want {
			t.Errorf("prefix routing %v: second turn went to %s, want %s", prefix, second, want)
		}
	}
}
