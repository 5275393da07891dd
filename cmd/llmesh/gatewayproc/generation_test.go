package gatewayproc

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/llmesh/llmesh/sim/simtest"
)

// TestNonGenerationNotScheduled: with the only slot taken by a long
// stream, GET /v1/models is proxied at once (not queued, not a reason to
// preempt), and it is counted apart from the generation metrics.
func TestNonGenerationNotScheduled(t *testing.T) {
	s := simtest.Start(t)
	data, admin := startRun(t, Config{Listen: "127.0.0.1:0", Admin: "127.0.0.1:0", Upstream: s.HTTPURL,
		Policy: "preemptive", MaxInflight: 1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const n = 3000
	res := post(t, ctx, data+"/v1/completions", fmt.Sprintf(`{"model":%q,"prompt":"a b","max_tokens":%d,"ignore_eos":true,"stream":true}`, s.Model, n))
	defer res.Body.Close()
	br := bufio.NewReader(res.Body)
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	// The stream holds the slot now.
	mctx, mcancel := context.WithTimeout(ctx, 20*time.Second)
	defer mcancel()
	req, _ := http.NewRequestWithContext(mctx, http.MethodGet, data+"/v1/models", nil)
	mres, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET /v1/models while the slot is taken: %v", err)
	}
	body, _ := io.ReadAll(mres.Body)
	mres.Body.Close()
	if mres.StatusCode != http.StatusOK || !strings.Contains(string(body), s.Model) {
		t.Fatalf("models: %d %s", mres.StatusCode, body)
	}
	rest, err := io.ReadAll(br)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(string(rest), `"text":`); got < n-1 || !strings.Contains(string(rest), "data: [DONE]") {
		t.Fatalf("the stream was cut (preempted?): %d chunks after the first", got)
	}
	var m string
	scrapes.UntilNil(t, "one generation and one passthrough request in the metrics", func() error {
		_, m = get(t, admin+"/metrics")
		gens, other := promSum(m, "gen_ai_server_request_duration_seconds_count"), promSum(m, "llmesh_passthrough_requests_total")
		if gens != 1 || other != 1 {
			return fmt.Errorf("generations %v, passthrough %v\n%s", gens, other, m)
		}
		return nil
	})
	if q := promSum(m, "llmesh_queue_duration_seconds_count"); q != 1 {
		t.Errorf("queue histogram count %v, want only the generation", q)
	}
}
