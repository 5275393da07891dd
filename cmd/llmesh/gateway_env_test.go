package main

import (
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/llmesh/llmesh/sim/simtest"
	"github.com/llmesh/llmesh/testkit/proctest"
)

// The command docs/config.md gives: a shipped bench mesh served as it is,
// with ${LLMESH_SIM} from the environment
// (LLMESH_SIM=127.0.0.1:8000 llmesh gateway --config bench/meshes/fifo.yaml).
func TestGatewayServesShippedBenchMesh(t *testing.T) {
	sim := simtest.Start(t)
	t.Setenv("LLMESH_SIM", strings.TrimPrefix(sim.HTTPURL, "http://"))
	s := serve(t, "gateway", "--config", "../../bench/meshes/fifo.yaml")
	addr := proctest.WaitMatch(t, &s.stdout, regexp.MustCompile(`gateway listening on (127\.0\.0\.1:\d+)`), s)[1]
	res, err := http.Post("http://"+addr+"/v1/completions", "application/json",
		strings.NewReader(`{"model":"`+sim.Model+`","prompt":"hello","max_tokens":2}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", res.StatusCode, body)
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
}
