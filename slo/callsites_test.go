package slo_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/llmesh/llmesh/bench/result"
	"github.com/llmesh/llmesh/bench/stats"
	"github.com/llmesh/llmesh/bench/workload"
	"github.com/llmesh/llmesh/exchange"
	"github.com/llmesh/llmesh/telemetry"
	"github.com/llmesh/llmesh/telemetry/attainment"
)

// request is one finished request as both sides see it: the bench's
// client-side record and a host's observation.
type request struct {
	failed    bool
	ttft      time.Duration // 0: no token came
	tokens    int           // output tokens
	gap       time.Duration // between tokens
	maxTokens int           // what the request asked for (the bench knows it)
	finish    string        // the engine's finish reason (the hosts know it)
}

var cases = []struct {
	name    string
	targets attainment.Targets
	req     request
	met     bool
}{
	{"fast stream", attainment.Targets{TTFT: 100 * time.Millisecond, TPOT: 20 * time.Millisecond},
		request{ttft: 50 * time.Millisecond, tokens: 8, gap: 10 * time.Millisecond, maxTokens: 8, finish: "length"}, true},
	{"late first token", attainment.Targets{TTFT: 100 * time.Millisecond},
		request{ttft: 150 * time.Millisecond, tokens: 8, gap: time.Millisecond, maxTokens: 8, finish: "length"}, false},
	{"slow tokens", attainment.Targets{TPOT: 20 * time.Millisecond},
		request{ttft: 50 * time.Millisecond, tokens: 8, gap: 30 * time.Millisecond, maxTokens: 8, finish: "length"}, false},
	{"failed", attainment.Targets{},
		request{failed: true, maxTokens: 8}, false},
	{"no targets", attainment.Targets{},
		request{ttft: time.Second, tokens: 1, maxTokens: 32, finish: "stop"}, true},
	// One token streamed while 32 were asked: the TPOT cannot be checked,
	// and unknown does not meet a TPOT target (the gateway once said met).
	{"one token of 32", attainment.Targets{TTFT: 100 * time.Millisecond, TPOT: 20 * time.Millisecond},
		request{ttft: 50 * time.Millisecond, tokens: 1, maxTokens: 32, finish: "stop"}, false},
	// One token because one was asked: nothing to pace, met.
	{"one token of 1", attainment.Targets{TTFT: 100 * time.Millisecond, TPOT: 20 * time.Millisecond},
		request{ttft: 50 * time.Millisecond, tokens: 1, maxTokens: 1, finish: "length"}, true},
	{"one token of 1, late", attainment.Targets{TTFT: 100 * time.Millisecond, TPOT: 20 * time.Millisecond},
		request{ttft: 150 * time.Millisecond, tokens: 1, maxTokens: 1, finish: "length"}, false},
	{"no token at all", attainment.Targets{TPOT: 20 * time.Millisecond},
		request{tokens: 0, maxTokens: 1, finish: "length"}, false},
	{"one token, TTFT target only", attainment.Targets{TTFT: 100 * time.Millisecond},
		request{ttft: 50 * time.Millisecond, tokens: 1, maxTokens: 32, finish: "stop"}, true},
}

func (q request) record() result.Record {
	r := result.Record{Index: 1, Class: "c", PromptTokens: 16, MaxTokens: q.maxTokens, SentNS: 1, Status: result.StatusOK, OutputTokens: q.tokens}
	if q.failed {
		r.Status, r.Error, r.DoneNS = result.StatusError, "HTTP 500", 2
		return r
	}
	t := r.SentNS + int64(q.ttft)
	r.DoneNS = t
	if q.ttft > 0 && q.tokens > 0 {
		r.FirstTokenNS = t
		for i := 0; i < q.tokens; i++ {
			r.ChunkNS = append(r.ChunkNS, t)
			r.DoneNS = t
			t += int64(q.gap)
		}
	}
	return r
}

func (q request) observation() exchange.Observation {
	o := exchange.Observation{OutputTokens: q.tokens, FinishReason: q.finish, Complete: true}
	if q.failed {
		o.ErrorKind, o.Error = exchange.ErrorUpstreamReset, "HTTP 500"
		return o
	}
	if q.ttft > 0 && q.tokens > 0 {
		o.TTFT, o.HasTTFT = q.ttft, true
		o.E2E = q.ttft + time.Duration(q.tokens-1)*q.gap
	}
	if o.HasTTFT && q.tokens > 1 {
		o.TPOT, o.HasTPOT = (o.E2E-o.TTFT)/time.Duration(q.tokens-1), true
	}
	return o
}

// The bench (bench/stats over a client record) and the hosts
// (telemetry.JudgeSLO over an observation, llmesh_slo_met) judge every
// request alike.
func TestCallSitesAgree(t *testing.T) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			y := fmt.Sprintf("name: t\nrequests: 1\narrival: {rate: 1}\nclasses: [{name: c, slo: {ttft: %s, tpot: %s}, prompt_tokens: {value: 16}, output_tokens: {value: 8}}]\n",
				tc.targets.TTFT, tc.targets.TPOT)
			s, err := workload.Parse([]byte(y))
			if err != nil {
				t.Fatal(err)
			}
			s.Default()
			w, err := workload.Compile(s, workload.CompileOptions{})
			if err != nil {
				t.Fatal(err)
			}
			rep := stats.Summarize([]result.Record{tc.req.record()}, stats.Meta{Workload: w})
			if bench := rep.Classes["c"].SLOAttainment == 1; bench != tc.met {
				t.Errorf("bench: met %v, want %v (violations %+v)", bench, tc.met, rep.Classes["c"].Violations)
			}
			obs := tc.req.observation()
			if host := telemetry.JudgeSLO(&obs, exchange.Class{Name: "c", TTFT: tc.targets.TTFT, TPOT: tc.targets.TPOT}); host.Met != tc.met {
				t.Errorf("host: %+v, want met %v", host, tc.met)
			}
		})
	}
}
