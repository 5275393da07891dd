package gatewayproc

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"

	"github.com/llmesh/llmesh/sim/simtest"
	"github.com/llmesh/llmesh/testkit/promtext"
)

// promSum adds up every sample of one Prometheus series name in a text
// exposition.
func promSum(body, name string) float64 {
	sum, _ := promtext.Sum(body, name)
	return sum
}

// TestInterChunkCountEqualsDecodeSteps: over a mixed run against the sim,
// with streams far longer than the observer's bounded samples, the
// gateway's inter-chunk histogram counts every gap: its count equals the
// sum of decode steps.
func TestInterChunkCountEqualsDecodeSteps(t *testing.T) {
	s := simtest.Start(t)
	data, admin := startRun(t, Config{Listen: "127.0.0.1:0", Admin: "127.0.0.1:0", Upstream: s.HTTPURL,
		Policy: "preemptive", MaxInflight: 4, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	lengths := []int{1100, 30, 700, 5, 900, 60, 1, 600}
	var wg sync.WaitGroup
	for i, n := range lengths {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := fmt.Sprintf(`{"model":%q,"prompt":"r%d a b c","max_tokens":%d,"stream":true,"ignore_eos":true,"priority":%d}`, s.Model, i, n, i%3)
			res := post(t, context.Background(), data+"/v1/completions", body)
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
		}()
	}
	wg.Wait()
	var body string
	scrapes.UntilNil(t, fmt.Sprintf("%d requests in the metrics", len(lengths)), func() error {
		_, body = get(t, admin+"/metrics")
		if promSum(body, "gen_ai_server_request_duration_seconds_count") < float64(len(lengths)) {
			return fmt.Errorf("metrics:\n%s", body)
		}
		return nil
	})
	gaps, steps := promSum(body, "llmesh_inter_chunk_duration_seconds_count"), promSum(body, "llmesh_decode_steps_sum")
	if gaps != steps || steps < 1100 {
		t.Errorf("inter-chunk count %v, decode steps %v: want equal (and over the 512 samples a request keeps)", gaps, steps)
	}
}
