package gateway

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/llmesh/llmesh/exchange"
	"github.com/llmesh/llmesh/sim/server"
	"github.com/llmesh/llmesh/sim/simtest"
)

// TestQuirksThroughGateway: the gateway's observation of an engine that
// merges piled-up deltas into one event and reports usage unasked: the
// output tokens come from the usage, not from counting events.
func TestQuirksThroughGateway(t *testing.T) {
	s := simtest.Start(t, simtest.WithConfig(func(c *server.Config) {
		c.Quirks = []string{string(server.QuirkMergeDeltas), string(server.QuirkUsageWithoutStreamOptions)}
	}))
	rec := newRecorder()
	_, gw := startGateway(t, Config{Pools: []Pool{{Name: "p", Upstream: s.HTTPURL}}}, WithRecorder(rec))
	req, err := http.NewRequest(http.MethodPost, gw+"/v1/completions",
		strings.NewReader(fmt.Sprintf(`{"model":%q,"prompt":"a b c","max_tokens":40,"stream":true}`, s.Model)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(server.FaultHeader, "stall=300ms") // tokens pile up meanwhile
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	r := rec.next(t)
	if !r.OK() || r.OutputTokens != 40 || r.OutputTokensSource != exchange.TokensFromUsage || r.TokenChunks >= 40 || !r.HasTPOT {
		t.Errorf("output %d from %v in %d chunks (TPOT %v): want 40 from usage in fewer chunks", r.OutputTokens, r.OutputTokensSource, r.TokenChunks, r.HasTPOT)
	}
}

// TestRoleChunkFirstThroughGateway: the opening event without a token is
// not the first token in the gateway's observation (chat and completions).
func TestRoleChunkFirstThroughGateway(t *testing.T) {
	s := simtest.Start(t, simtest.WithConfig(func(c *server.Config) { c.Quirks = []string{string(server.QuirkRoleChunkFirst)} }))
	rec := newRecorder()
	_, gw := startGateway(t, Config{Pools: []Pool{{Name: "p", Upstream: s.HTTPURL}}}, WithRecorder(rec))
	for path, body := range map[string]string{
		"/v1/completions":      fmt.Sprintf(`{"model":%q,"prompt":"a b c","max_tokens":6,"stream":true}`, s.Model),
		"/v1/chat/completions": fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"a b"}],"max_tokens":6,"stream":true}`, s.Model),
	} {
		res, err := http.Post(gw+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		r := rec.next(t)
		if !r.OK() || r.TokenChunks != 6 || r.OutputTokens != 6 || r.Chunks < 7 {
			t.Errorf("%s: token chunks %d of %d, output %d: want 6 token chunks after one without", path, r.TokenChunks, r.Chunks, r.OutputTokens)
		}
	}
}
