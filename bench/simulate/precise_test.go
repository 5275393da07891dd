package simulate

import "testing"

// Precise prefix routing reads the engines' block pools instead of where
// requests went: it keeps conversations together as well as prefix-aware
// routing does, by the engines' own hit counters, and far better than
// endpoint-aware routing.
func TestPrefixPreciseFollowsTheEnginesCaches(t *testing.T) {
	w := conversations(t, 7, 6)
	ea := prefixRun(t, w, RoutingEndpointAware)
	pa := prefixRun(t, w, RoutingPrefixAware)
	pp := prefixRun(t, w, RoutingPrefixPrecise)
	hits := func(r *Run) int64 {
		if r.PrefixCache.HitTokens == nil {
			t.Fatal("no engine hit count")
		}
		return *r.PrefixCache.HitTokens
	}
	unbounded := pp.PrefixCache.UnboundedHitTokens
	if got := hits(pp); got < unbounded*85/100 || got < hits(pa)*95/100 || got < 2*hits(ea) {
		t.Errorf("prefix-precise: engines hit %d tokens; want at least 85%% of the unbounded %d, 95%% of prefix-aware's %d and twice endpoint-aware's %d",
			got, unbounded, hits(pa), hits(ea))
	}
	for _, e := range pp.Sim.Endpoints {
		if e.Requests < 6 {
			t.Errorf("prefix-precise: engine %s finished %d requests, want at least one conversation (6)", e.Name, e.Requests)
		}
	}
	t.Logf("engine hit tokens: unbounded %d, endpoint-aware %d, prefix-aware %d, prefix-precise %d", unbounded, hits(ea), hits(pa), hits(pp))
}
