package scheduler_test

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/kvblock"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/pools"
)

// promptBlocks is a prompt's block hashes: n blocks of tokens numbered
// from seed, so that equal seeds share a prefix.
func promptBlocks(seed uint32, n int) []kvblock.Hash {
	toks := make([]uint32, n*kvblock.DefaultBlockSize)
	for i := range toks {
		toks[i] = seed<<16 + uint32(i)
	}
	return kvblock.Chain(nil, 0, toks, kvblock.DefaultBlockSize)
}

// prefixPool is a pool of three endpoints of limit 4 with prefix routing
// of the given weight (0: off).
func prefixPool(weight float64) scheduler.PoolConfig {
	pc := preemptivePool(12, rails)
	pc.Endpoints = []scheduler.EndpointConfig{{Name: "a:1", MaxInflight: 4}, {Name: "b:1", MaxInflight: 4}, {Name: "c:1", MaxInflight: 4}}
	// No derived prefill bound or reserve: the picker alone decides.
	pc.StaticBounds = true
	if weight > 0 {
		pc.PrefixRouting = scheduler.PrefixRouting{Weight: weight, CapacityBlocks: 1000}
	}
	return pc
}

// admitOne arrives r at ms, steps, and returns the endpoint it went to.
func admitOne(t *testing.T, m *scheduler.Machine, ms int, r scheduler.Request) string {
	t.Helper()
	tk := arrive(t, m, at(ms), r)
	m.Step(at(ms))
	return endpointOf(t, m, tk)
}

func TestPrefixRoutingFollowsTheEndpointThatServedThePrefix(t *testing.T) {
	// Each request's prompt is the shared 6 blocks plus 2 of its own: its
	// match on the endpoint that served the prefix is 6/8.
	shared := promptBlocks(1, 6)
	prompt := func(i int) []kvblock.Hash { return append(slices.Clone(shared), promptBlocks(uint32(100+i), 2)...) }
	route := func(weight float64) []string {
		m := newMachine(t, prefixPool(weight))
		var got []string
		for i := range 6 {
			got = append(got, admitOne(t, m, i, scheduler.Request{Class: "batch", PromptTokens: 128, Blocks: prompt(i)}))
		}
		return got
	}
	// Off: least loaded, spreading the prefix over every endpoint.
	if diff := cmp.Diff([]string{"a:1", "b:1", "c:1", "a:1", "b:1", "c:1"}, route(0)); diff != "" {
		t.Errorf("without prefix routing (-want +got):\n%s", diff)
	}
	// Weight 2: a's match (2 × 6/8 = 1.5) outweighs its load until it is
	// full at 4; then b, which has the prefix now.
	if diff := cmp.Diff([]string{"a:1", "a:1", "a:1", "a:1", "b:1", "b:1"}, route(2)); diff != "" {
		t.Errorf("with prefix routing (-want +got):\n%s", diff)
	}
	// Weight 0.4: a match (0.3) outweighs one request's load (1/4) but
	// not two: each endpoint takes two in turn.
	if diff := cmp.Diff([]string{"a:1", "a:1", "b:1", "b:1", "c:1", "c:1"}, route(0.4)); diff != "" {
		t.Errorf("with a light weight (-want +got):\n%s", diff)
	}
}

func TestPrefixRoutingLoadedEndpointLosesToIdleOne(t *testing.T) {
	blocks := promptBlocks(1, 8)
	for _, tc := range []struct {
		weight float64
		want   string
	}{
		// a's load score: (3+1)/4 + 0.5 = 1.5; b's 0.
		{weight: 1, want: "b:1"},
		{weight: 1.4, want: "b:1"},
		{weight: 2, want: "a:1"},
	} {
		m := newMachine(t, prefixPool(tc.weight))
		if got := admitOne(t, m, 0, scheduler.Request{Class: "batch", Blocks: blocks}); got != "a:1" {
			t.Fatalf("weight %v: first request went to %s", tc.weight, got)
		}
		if err := m.SetEndpointLoad("p", "a:1", scheduler.EndpointLoad{Running: 3, Waiting: 1, KVUsage: 0.5}); err != nil {
			t.Fatal(err)
		}
		if got := admitOne(t, m, 1, scheduler.Request{Class: "batch", Blocks: blocks}); got != tc.want {
			t.Errorf("weight %v: with a loaded the repeated prompt went to %s, want %s", tc.weight, got, tc.want)
		}
	}
}

func TestPrefixRoutingUrgentRequestCountsItsHit(t *testing.T) {
	blocks := promptBlocks(1, 64) // 1024 tokens
	route := func(weight float64) []string {
		m := newMachine(t, prefixPool(weight))
		// A batch request with the prompt goes to a; its first token ends
		// its prefill.
		tk := arrive(t, m, at(0), scheduler.Request{Class: "batch", PromptTokens: 1024, Blocks: blocks})
		m.Step(at(0))
		m.Progress(at(1), tk, scheduler.Progress{FirstToken: true, Tokens: 1})
		// Prefill backlogs: b 500 tokens, c 300, a 400 (a batch request
		// with the prompt, so it follows it under prefix routing).
		var got []string
		got = append(got, admitOne(t, m, 2, scheduler.Request{Class: "batch", PromptTokens: 500}))
		got = append(got, admitOne(t, m, 3, scheduler.Request{Class: "batch", PromptTokens: 300}))
		got = append(got, admitOne(t, m, 4, scheduler.Request{Class: "batch", PromptTokens: 400, Blocks: blocks}))
		// Urgent requests: the repeated prompt, then a new one.
		got = append(got, admitOne(t, m, 5, scheduler.Request{Class: "interactive", PromptTokens: 1024, Blocks: blocks}))
		got = append(got, admitOne(t, m, 6, scheduler.Request{Class: "interactive", PromptTokens: 1024, Blocks: promptBlocks(2, 64)}))
		return got
	}
	// On: the urgent repeated prompt waits behind a's 400 tokens but
	// computes almost none of its own 1024, so a beats c's 300 + 1024;
	// the new prompt computes 1024 everywhere and goes to the smallest
	// backlog, c.
	if diff := cmp.Diff([]string{"b:1", "c:1", "a:1", "a:1", "c:1"}, route(1)); diff != "" {
		t.Errorf("with prefix routing (-want +got):\n%s", diff)
	}
	// Off: by backlog alone (a's 400 went to a by load order too).
	if diff := cmp.Diff([]string{"b:1", "c:1", "a:1", "c:1", "a:1"}, route(0)); diff != "" {
		t.Errorf("without prefix routing (-want +got):\n%s", diff)
	}
}

func TestPrefixRoutingAffinityWins(t *testing.T) {
	m := newMachine(t, prefixPool(10))
	blocks := promptBlocks(1, 8)
	first := admitOne(t, m, 0, scheduler.Request{Class: "batch", Blocks: blocks})
	// With an affinity key the key's endpoint is taken whatever the match.
	var key, keyEp string
	for _, k := range []string{"k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7"} {
		m2 := newMachine(t, prefixPool(0))
		if ep := admitOne(t, m2, 0, scheduler.Request{Class: "batch", Affinity: k}); ep != first {
			key, keyEp = k, ep
			break
		}
	}
	if key == "" {
		t.Fatal("no affinity key ranks another endpoint first")
	}
	if got := admitOne(t, m, 1, scheduler.Request{Class: "batch", Affinity: key, Blocks: blocks}); got != keyEp {
		t.Fatalf("with affinity %q went to %s, want %s", key, got, keyEp)
	}
	// The admission was recorded there: both endpoints now hold the prompt.
	var matched uint64
	for _, e := range m.Stats()[0].Endpoints {
		if e.Name == keyEp {
			if e.PrefixBlocks != 8 || e.PrefixMatched != 0 {
				t.Errorf("%s: prefix blocks %d, matched %d; want 8, 0", e.Name, e.PrefixBlocks, e.PrefixMatched)
			}
		}
		matched += e.PrefixMatched
	}
	if matched != 0 {
		t.Errorf("matched %d blocks before any repeat", matched)
	}
	for i := range 2 {
		admitOne(t, m, 2+i, scheduler.Request{Class: "batch", Blocks: blocks})
	}
	matched = 0
	for _, e := range m.Stats()[0].Endpoints {
		matched += e.PrefixMatched
	}
	if matched != 16 {
		t.Errorf("two repeats matched %d blocks, want 16", matched)
	}
}

// TestPrefixRoutingOffChangesNothing runs one mixed sequence through a
// pool without prefix routing (with and without blocks) and through one
// with it but no blocks: every admission goes to the same endpoint.
func TestPrefixRoutingOffChangesNothing(t *testing.T) {
	run := func(pc scheduler.PoolConfig, withBlocks bool) []string {
		m := newMachine(t, pc)
		var got []string
		var live []scheduler.Ticket
		for i := range 40 {
			r := scheduler.Request{Class: []string{"batch", "interactive"}[i%3/2], PromptTokens: 100 + 37*i%400, MaxTokens: 50}
			if withBlocks {
				r.Blocks = promptBlocks(uint32(i%4), 1+i%7)
			}
			if i%5 == 0 {
				_ = m.SetEndpointLoad("p", []string{"a:1", "b:1", "c:1"}[i%3], scheduler.EndpointLoad{Running: i % 4, Waiting: i % 2, KVUsage: float64(i%10) / 10})
			}
			tk := arrive(t, m, at(i), r)
			d := m.Step(at(i))
			for _, a := range d.Admitted {
				got = append(got, endpointOf(t, m, a))
				live = append(live, a)
			}
			_ = tk
			if len(live) > 6 {
				m.Finish(at(i), live[0], scheduler.Done)
				live = live[1:]
			}
		}
		return got
	}
	want := run(prefixPool(0), false)
	if len(want) < 30 {
		t.Fatalf("only %d admissions", len(want))
	}
	if diff := cmp.Diff(want, run(prefixPool(0), true)); diff != "" {
		t.Errorf("off, with blocks (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, run(prefixPool(1), false)); diff != "" {
		t.Errorf("on, without blocks (-want +got):\n%s", diff)
	}
}

func TestPrefixRoutingValidation(t *testing.T) {
	for _, tc := range []struct {
		pr   scheduler.PrefixRouting
		want string
	}{
		{scheduler.PrefixRouting{Weight: -1, CapacityBlocks: 10}, "pools[0].prefix_routing.weight: -1 must be"},
		{scheduler.PrefixRouting{Weight: math.NaN(), CapacityBlocks: 10}, "pools[0].prefix_routing.weight: NaN must be"},
		{scheduler.PrefixRouting{Weight: math.Inf(1), CapacityBlocks: 10}, "pools[0].prefix_routing.weight: +Inf must be"},
		{scheduler.PrefixRouting{Weight: 1}, "pools[0].prefix_routing.capacity_blocks: 0 must be in [1, 16777216]"},
		{scheduler.PrefixRouting{Weight: 1, CapacityBlocks: 1 << 30}, "pools[0].prefix_routing.capacity_blocks: 1073741824 must be"},
		{scheduler.PrefixRouting{CapacityBlocks: -3}, "pools[0].prefix_routing.capacity_blocks: -3 must be"},
	} {
		pc := prefixPool(0)
		pc.Name = "p"
		pc.PrefixRouting = tc.pr
		cfg := scheduler.Config{Pools: []scheduler.PoolConfig{pc}, Classes: twoClasses()}
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error containing %q", tc.pr, err, tc.want)
		}
	}
}

// A mesh pool's prefix_routing reaches the scheduler's pool; a pool
// without it has prefix routing off.
func TestPrefixRoutingFromMesh(t *testing.T) {
	cfg, err := config.Load([]byte(`
pools:
  - {name: a, protocol: openai, endpoints: [h:1, h:2], prefix_routing: {weight: 2, capacity_blocks: 5000}}
  - {name: b, protocol: openai, endpoints: [h:3]}
`))
	if err != nil {
		t.Fatal(err)
	}
	sc, err := pools.Config(cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := []scheduler.PrefixRouting{{Weight: 2, CapacityBlocks: 5000}, {}}
	for i, w := range want {
		if got := sc.Pools[i].PrefixRouting; got != w {
			t.Errorf("pool %s: prefix routing %+v, want %+v", sc.Pools[i].Name, got, w)
		}
	}
	if _, err := scheduler.NewMachine(sc); err != nil {
		t.Fatal(err)
	}
}

// TestPrefixRoutingRequeueReturnsToItsPrefix: a request preempted and
// queued again with its blocks goes back to the endpoint it was sent to,
// whose cache holds its prompt, though another is as loaded and comes
// first (where it goes without prefix routing).
func TestPrefixRoutingRequeueReturnsToItsPrefix(t *testing.T) {
	for _, weight := range []float64{2, 0} {
		m := newMachine(t, prefixPool(weight))
		blocks := promptBlocks(7, 8)
		filler := func(ms int) string { return admitOne(t, m, ms, scheduler.Request{Class: "batch", PromptTokens: 128}) }
		if ep := filler(0); ep != "a:1" {
			t.Fatalf("first filler on %s", ep)
		}
		x := arrive(t, m, at(1), scheduler.Request{Class: "batch", PromptTokens: 128, Blocks: blocks})
		m.Step(at(1))
		if ep := endpointOf(t, m, x); ep != "b:1" {
			t.Fatalf("request on %s, want b:1", ep)
		}
		if ep := filler(2); ep != "c:1" {
			t.Fatalf("second filler on %s", ep)
		}
		m.Finish(at(3), x, scheduler.Preempted)
		if ep := filler(4); ep != "b:1" {
			t.Fatalf("third filler on %s", ep)
		}
		// Every endpoint holds one request: the requeue decides by prefix.
		got := admitOne(t, m, 5, scheduler.Request{Class: "batch", PromptTokens: 128, Blocks: blocks, Requeue: true})
		want := "b:1"
		if weight == 0 {
			want = "a:1"
		}
		if got != want {
			t.Errorf("weight %v: requeued request on %s, want %s", weight, got, want)
		}
	}
}
