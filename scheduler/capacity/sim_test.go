package capacity_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmesh/llmesh/scheduler/capacity"
	"github.com/llmesh/llmesh/sim"
	"github.com/llmesh/llmesh/sim/simtest"
	"github.com/llmesh/llmesh/testkit/wait"
)

// The real simulated engine, running 2 sequences at most, gets 5 long
// requests: its /metrics then shows 2 running and 3 waiting, and the
// watcher holds the pool at running + slack = 4.
func TestWatcherAgainstSim(t *testing.T) {
	s := simtest.Start(t, simtest.WithTimeScale(1), simtest.WithEngine(sim.Config{MaxNumSeqs: 2}))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	for i := 0; i < 5; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := fmt.Sprintf(`{"model":%q,"prompt":"hello","max_tokens":4000,"stream":true}`, s.Model)
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.HTTPURL+"/v1/completions", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return // cancelled at the end of the test
			}
			defer resp.Body.Close()
			_, _ = io.Copy(io.Discard, resp.Body)
		}()
	}
	tgt := &limits{}
	w, err := capacity.New(capacity.Config{Pool: "gpu", URL: s.HTTPURL + "/metrics", Interval: 10 * time.Millisecond,
		Rule: capacity.Rule{Max: 16}}, tgt, nil)
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = w.Run(wctx)
	}()
	defer func() {
		wcancel()
		<-done
	}()
	start := time.Now()
	wait.UntilNil(t, "the watcher to see the saturated engine", func() error {
		st := w.Status()
		if st.Last.Running == 2 && st.Last.Waiting == 3 && st.Limit == 4 && !st.Stale { // running 2 + slack 16/8
			t.Logf("saturated after %v: %+v", time.Since(start), st)
			return nil
		}
		return fmt.Errorf("status %+v", st)
	})
}
