package simtest_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/llmesh/llmesh/sim"
	"github.com/llmesh/llmesh/sim/simtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestStartServesAndStops(t *testing.T) {
	var addrs []string
	t.Run("run", func(t *testing.T) {
		s := simtest.Start(t, simtest.WithTimeScale(50), simtest.WithProfile("qwen2.5-7b-h200"), simtest.WithEngine(sim.Config{MaxNumSeqs: 4}))
		addrs = append(addrs, s.HTTPURL)
		if s.Model != "qwen2.5-7b-h200" || s.GRPCAddr == "" || s.Server.Config().Engine.MaxNumSeqs != 4 {
			t.Errorf("sim %+v", s)
		}
		resp, err := http.Post(s.HTTPURL+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"a b","max_tokens":3}`))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), "llmesh_engine") {
			t.Errorf("%d %s", resp.StatusCode, b)
		}
	})
	// After the subtest's cleanup the listener is closed.
	if resp, err := http.Get(addrs[0] + "/health"); err == nil {
		resp.Body.Close()
		t.Error("sim still serving after cleanup")
	}
}
