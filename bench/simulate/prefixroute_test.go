package simulate

import (
	"strings"
	"testing"
	"time"

	"github.com/llmesh/llmesh/bench/trace"
	"github.com/llmesh/llmesh/bench/workload"
	"github.com/llmesh/llmesh/bench/workloads"
)

// conversations is a Mooncake-style trace of convs conversations of turns
// turns each, interleaved: turn k of conversation c repeats the
// conversation's k earlier 512-token blocks and adds one, so each turn's
// prompt extends the one before. Arrivals 20ms apart and 300 output tokens
// keep many requests in flight, so that load decides where a request goes
// unless its prefix does.
func conversations(t *testing.T, convs, turns int) *workload.Workload {
	t.Helper()
	w, err := workloads.LoadStandard()
	if err != nil {
		t.Fatal(err)
	}
	var rows []trace.MooncakeRow
	for k := range turns {
		for c := range convs {
			ids := make([]uint64, k+1)
			for i := range ids {
				ids[i] = uint64(1000*c + i)
			}
			rows = append(rows, trace.MooncakeRow{
				Row:     trace.Row{At: time.Duration(k*convs+c) * 20 * time.Millisecond, PromptTokens: (k+1)*512 - 7, OutputTokens: 300},
				HashIDs: ids,
			})
		}
	}
	return w.WithMooncake(rows)
}

// prefixRun evaluates w on 4 engines under routing r with one policy and
// returns its run.
func prefixRun(t *testing.T, w *workload.Workload, r string) *Run {
	t.Helper()
	res, err := Evaluate(w, []string{"fifo"}, nil, Options{Engines: 4, Routing: r, SaturationRequests: 100, SkipFloor: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Runs) != 1 || res.Runs[0].PrefixCache == nil || res.Runs[0].PrefixCache.RoutedHitTokens == nil {
		t.Fatalf("%s: runs %+v without a routed prefix model", r, res.Runs)
	}
	return res.Runs[0]
}

// Prefix-aware routing sends each turn of a conversation to the engine
// that served its earlier turns, so that a cache of one engine's KV per
// engine serves nearly every repeated block (what a cache that never
// evicts would); endpoint-aware routing, blind to prefixes, spreads the
// turns and serves about half. The conversations still spread over every
// engine. (Measured where requests went, not by TTFT: the engine model
// does not yet serve prefixes from a cache.)
func TestPrefixAwareKeepsConversationsTogether(t *testing.T) {
	// 7 conversations over 4 engines: taking turns by load does not keep
	// a conversation on one engine by chance.
	w := conversations(t, 7, 6)
	ea := prefixRun(t, w, RoutingEndpointAware)
	pa := prefixRun(t, w, RoutingPrefixAware)
	unbounded := pa.PrefixCache.UnboundedHitTokens
	if unbounded == 0 || ea.PrefixCache.UnboundedHitTokens != unbounded {
		t.Fatalf("unbounded hits: endpoint-aware %d, prefix-aware %d", ea.PrefixCache.UnboundedHitTokens, unbounded)
	}
	// Not every one: an urgent request goes where the fewest prompt
	// tokens are ahead of its prefill, its own hit counted, and may leave
	// its conversation's engine while that one prefills another prompt.
	if got := *pa.PrefixCache.RoutedHitTokens; got < unbounded*85/100 {
		t.Errorf("prefix-aware: routed hits %d tokens, want at least 85%% of every repeated block, %d", got, unbounded)
	}
	if got := *ea.PrefixCache.RoutedHitTokens; got > unbounded*60/100 {
		t.Errorf("endpoint-aware: routed hits %d of %d tokens; want at most 60%% (is the trace too easy?)", got, unbounded)
	}
	for _, e := range pa.Sim.Endpoints {
		if e.Requests < 6 {
			t.Errorf("prefix-aware: engine %s finished %d requests, want at least one conversation (6)", e.Name, e.Requests)
		}
	}
	t.Logf("hit tokens of %d prompt tokens: unbounded %d, routed endpoint-aware %d, prefix-aware %d; imbalance %.3f vs %.3f",
		pa.PrefixCache.PromptTokens, unbounded, *ea.PrefixCache.RoutedHitTokens, *pa.PrefixCache.RoutedHitTokens, ea.Sim.Imbalance, pa.Sim.Imbalance)
}

// The routing option is validated with the other options: an unknown one
// is reported with the valid ones, and a bad prefix weight by name.
func TestRoutingOptionValidation(t *testing.T) {
	w := conversations(t, 1, 1)
	_, err := Options{Routing: "prefix"}.withDefaults(w)
	if err == nil || !strings.Contains(err.Error(), `routing: "prefix" must be one of endpoint-aware, pool, prefix-aware`) {
		t.Errorf("unknown routing: %v", err)
	}
	_, err = Options{Routing: RoutingPrefixAware, PrefixWeight: -1}.withDefaults(w)
	if err == nil || !strings.Contains(err.Error(), "prefix_weight: -1 must be") {
		t.Errorf("negative weight: %v", err)
	}
	o, err := Options{Routing: RoutingPrefixAware}.withDefaults(w)
	if err != nil || o.PrefixWeight != DefaultPrefixWeight {
		t.Errorf("defaults: weight %v, %v", o.PrefixWeight, err)
	}
}

// A single engine has no routing, so no routed model; a fleet without
// prompt identities has none either.
func TestRoutedModelOnlyWhereItMeansSomething(t *testing.T) {
	if r := hasSegments([]workload.Item{{PromptTokens: 100}}); r {
		t.Error("routed model without identities")
	}
	item := func(ids ...uint64) workload.Item {
		return workload.Item{PromptTokens: 1000, Segments: trace.MooncakeSegments(nil, ids, 1000)}
	}
	if !hasSegments([]workload.Item{item(1, 2)}) {
		t.Fatal("an item with segments has none")
	}
	r := newRoutedCaches(2, 1000)
	observe := func(ep int, ids ...uint64) {
		it := item(ids...)
		r.observe(ep, it, promptBlocks(it))
	}
	observe(0, 1, 2)
	observe(1, 1, 3) // another engine: no hit
	observe(0, 1, 3) // shares block 1 with the first
	if r.hits != 512 {
		t.Errorf("routed hits %d, want 512 (one 512-token block, on engine 0)", r.hits)
	}
	h := r.hits
	if line := routedLine(&PrefixCache{PromptTokens: 3000, RoutedHitTokens: &h}); !strings.Contains(line, "17.1%") {
		t.Errorf("routedLine = %q", line)
	}
}
