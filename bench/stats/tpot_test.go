package stats

import (
	"testing"

	"github.com/llmesh/llmesh/bench/result"
)

// TestTPOTUnknownIsAMiss: a request whose TPOT cannot be computed (here:
// an engine that reported 0 output tokens) does not meet a TPOT SLO; a
// request that asked for one token and got it has no TPOT to miss.
func TestTPOTUnknownIsAMiss(t *testing.T) {
	w := testWorkload(t)
	noUsage := rec(1, "hi", 100, 50, 5)
	noUsage.OutputTokens = 0
	one := rec(2, "hi", 200, 50, 5)
	one.MaxTokens, one.OutputTokens, one.ChunkNS = 1, 1, one.ChunkNS[:1]
	one.DoneNS = one.FirstTokenNS
	ok := rec(3, "hi", 300, 50, 5)
	ok.OutputTokensSource = result.SourceStream
	rep := Summarize([]result.Record{noUsage, one, ok}, Meta{Workload: w})
	hi := rep.Classes["hi"]
	if hi.Violations.TPOTUnknown != 1 || hi.Violations.TPOT != 0 || hi.SLOAttainment != 2.0/3 {
		t.Errorf("violations %+v attainment %v, want 1 tpot_unknown and 2/3 met", hi.Violations, hi.SLOAttainment)
	}
	if rep.OutputTokensSource[result.SourceStream] != 1 || len(rep.OutputTokensSource) != 1 {
		t.Errorf("output tokens source %v, want stream: 1", rep.OutputTokensSource)
	}
	// A class without a TPOT SLO is not affected.
	lo := noUsage
	lo.Class = "lo"
	if rep := Summarize([]result.Record{lo}, Meta{Workload: w}); rep.Classes["lo"].SLOAttainment != 1 {
		t.Errorf("lo attainment %v, want 1", rep.Classes["lo"].SLOAttainment)
	}
}

// TestQueueFullBucket: llmesh's queue-full refusals are counted apart from
// an engine's 429.
func TestQueueFullBucket(t *testing.T) {
	w := testWorkload(t)
	recs := []result.Record{
		{Index: 1, Class: "lo", SentNS: 1, DoneNS: 2, Status: result.StatusRejected, Code: 429},
		{Index: 2, Class: "lo", SentNS: 1, DoneNS: 2, Status: result.StatusQueueFull, Code: 429},
		{Index: 3, Class: "lo", SentNS: 1, DoneNS: 2, Status: result.StatusQueueFull, Code: 429},
	}
	lo := Summarize(recs, Meta{Workload: w}).Classes["lo"]
	if lo.Violations != (result.Violations{Rejected: 1, QueueFull: 2}) || lo.Failed != 3 {
		t.Errorf("violations %+v failed %d", lo.Violations, lo.Failed)
	}
}
