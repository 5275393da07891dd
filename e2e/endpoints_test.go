package e2e

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/llmesh/llmesh/testkit/proctest"
	"github.com/llmesh/llmesh/testkit/promtext"
)

// TestTwoSimsOnePool runs two `llmesh sim` processes behind one gateway
// pool whose endpoints allow two requests each (the pool allows eight) and
// sends twelve streams at once: both sims serve requests, and neither ever
// held more than its endpoint's limit, by its own peak metric.
func TestTwoSimsOnePool(t *testing.T) {
	const limit, n = 2, 12
	sims := []*proctest.Sim{startSim(t, "sim-a", "--time-scale", "10"), startSim(t, "sim-b", "--time-scale", "10")}
	addr := func(s *proctest.Sim) string { return strings.TrimPrefix(s.URL, "http://") }
	path := proctest.WriteTemp(t, "mesh.yaml", fmt.Sprintf(`listeners:
  - {name: main, address: 127.0.0.1:0, routes: [{pool: engine}]}
pools:
  - name: engine
    protocol: openai
    capacity: {max_inflight: 8}
    scheduler: {policy: fifo}
    endpoints:
      - {address: %s, max_inflight: %d}
      - {address: %s, max_inflight: %d}
classes:
  - {name: standard, priority: 0, queue: {max_length: 100, max_wait: 2m}}
default_class: standard
admin: {address: 127.0.0.1:0}
`, addr(sims[0]), limit, addr(sims[1]), limit))
	gw := startGateway(t, "gateway", "--config", path)
	body := `{"model":"` + sims[0].Model + `","prompt":"hello there","max_tokens":16,"stream":true}`
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := http.Post(gw.URL()+"/v1/completions", "application/json", strings.NewReader(body))
			if err != nil {
				t.Error(err)
				return
			}
			defer res.Body.Close()
			if _, err := io.ReadAll(res.Body); err != nil || res.StatusCode != http.StatusOK {
				t.Errorf("status %d, %v", res.StatusCode, err)
			}
		}()
	}
	wg.Wait()
	total := 0.0
	for i, s := range sims {
		text := proctest.MustGet(t, s.URL+"/metrics")
		done, _ := promtext.Sum(text, "vllm:request_success_total")
		peak, ok := promtext.Sum(text, "llmesh_sim:requests_peak")
		if !ok {
			t.Fatalf("sim %d exports no llmesh_sim:requests_peak", i)
		}
		t.Logf("sim %d (%s): %v requests done, peak %v held at once", i, addr(s), done, peak)
		if done == 0 {
			t.Errorf("sim %d served no request", i)
		}
		if peak > limit {
			t.Errorf("sim %d held %v requests at once, its endpoint limit is %d", i, peak, limit)
		}
		total += done
	}
	if total != n {
		t.Errorf("sims served %v requests, want %d", total, n)
	}
}
