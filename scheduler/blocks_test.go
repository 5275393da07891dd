package scheduler_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/llmesh/llmesh/scheduler"
)

// Under precise prefix routing the picker follows what engines report
// holding, not where requests went: an admission teaches it nothing, and
// an eviction or a clear takes the match away.
func TestPrecisePrefixRoutingFollowsEngineReports(t *testing.T) {
	pc := prefixPool(2)
	pc.PrefixRouting = scheduler.PrefixRouting{Weight: 2, Precise: true}
	m := newMachine(t, pc)
	blocks := promptBlocks(1, 8)
	req := scheduler.Request{Class: "batch", PromptTokens: 128, Blocks: blocks}

	// Nothing reported: least loaded, and the admission is not learned.
	var got []string
	for i := range 3 {
		got = append(got, admitOne(t, m, i, req))
	}
	if d := cmp.Diff([]string{"a:1", "b:1", "c:1"}, got); d != "" {
		t.Errorf("with no reports (-want +got):\n%s", d)
	}
	c, err := m.EndpointBlocks("p", "c:1")
	if err != nil {
		t.Fatal(err)
	}
	c.Stored(blocks)
	if ep := admitOne(t, m, 10, req); ep != "c:1" {
		t.Errorf("c reports the prefix: went to %s", ep)
	}
	c.Removed(blocks[:1]) // without its first block nothing matches
	b, _ := m.EndpointBlocks("p", "b:1")
	b.Stored(blocks[:4])
	if ep := admitOne(t, m, 11, req); ep != "b:1" {
		t.Errorf("c evicted the first block, b holds half: went to %s", ep)
	}
	b.Cleared()
	if ep := admitOne(t, m, 12, req); ep != "a:1" {
		t.Errorf("after b cleared: went to %s, want the least loaded a", ep)
	}
	if _, err := m.EndpointBlocks("p", "z:1"); err == nil {
		t.Error("unknown endpoint accepted")
	}
	approx := newMachine(t, prefixPool(2))
	if _, err := approx.EndpointBlocks("p", "a:1"); err == nil {
		t.Error("an approximate pool handed out a block sink")
	}
}
