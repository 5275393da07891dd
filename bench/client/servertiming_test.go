package client

import (
	"testing"

	"github.com/llmesh/llmesh/bench/result"
)

func TestReadServerTiming(t *testing.T) {
	var rec result.Record
	readServerTiming(&rec, []string{`queue;dur=12.5`, `queue;dur=12.500, ttft;dur=85.3, tokens;desc="64", preemptions;desc="2"`})
	if rec.LLMesh == nil || !rec.LLMesh.HasQueue || rec.LLMesh.QueueNS != 12_500_000 || rec.LLMesh.Preemptions != 2 || rec.Preemptions != 2 {
		t.Errorf("got %+v %+v", rec.LLMesh, rec)
	}
	var none result.Record
	readServerTiming(&none, []string{`cache;desc="hit", queue;dur=-3, preemptions;desc="x", queue`})
	if none.LLMesh != nil || none.Preemptions != 0 {
		t.Errorf("bad values read: %+v", none.LLMesh)
	}
}

func FuzzServerTiming(f *testing.F) {
	for _, s := range []string{`queue;dur=1.204, ttft;dur=85.3, upstream-ttft;dur=84.1, tpot;dur=12.5, e2e;dur=950.2, tokens;desc="64"`,
		`preemptions;desc="3"`, `;;,,=`, `queue;dur=1e300`, `queue;dur="5"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var rec result.Record
		readServerTiming(&rec, []string{s})
		if e := rec.LLMesh; e != nil && (e.QueueNS < 0 || e.Preemptions < 0 || rec.Preemptions != e.Preemptions && e.Preemptions != 0) {
			t.Fatalf("%q: %+v", s, e)
		}
	})
}
