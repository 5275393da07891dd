package gatewayproc

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/llmesh/llmesh/sim/server"
	"github.com/llmesh/llmesh/sim/simtest"
)

// abortMesh is one pool on ENGINE with two slots, the preemptive policy
// and the engine's own /metrics scraped every 200ms for each endpoint. A
// scrape's timeout is its interval and a failed scrape drains the
// endpoint; under -race on a loaded machine a scrape can take longer than
// 50ms.
const abortMesh = `listeners:
  - name: main
    address: 127.0.0.1:1
    routes:
      - {name: urgent, match: {path_prefix: /v1/, headers: {x-class: interactive}}, pool: sim, class: interactive}
      - {name: rest, match: {path_prefix: /v1/}, pool: sim, class: batch}
pools:
  - name: sim
    protocol: openai
    endpoints: [ENGINE]
    capacity: {max_inflight: 2, metrics: {url_template: "http://{endpoint}/metrics", interval: 200ms}}
    scheduler: {policy: preemptive, preemption: {min_lower_inflight: 1, max_per_request: 3}}
classes:
  - {name: interactive, priority: 0, slo: {ttft: 50ms}}
  - {name: batch, priority: 10, slo: {ttft: 1m, tpot: 50ms}, preemptible: true}
default_class: batch
`

// adminMetric reads one series' value from the gateway's admin /metrics;
// ok is false when the series is absent.
func adminMetric(t *testing.T, admin, series string) (float64, bool) {
	t.Helper()
	_, body := get(t, admin+"/metrics")
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`)
	m := re.FindStringSubmatch(body)
	if m == nil {
		return 0, false
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatalf("%s: %v", series, err)
	}
	return v, true
}

// TestAbortUnhonouredThroughGateway: an engine that keeps generating after
// the client goes (sim --quirks no-abort). One preemption leaves the
// engine holding more than the gateway has in flight; the gateway's admin
// /metrics then shows llmesh_preemption_abort_unhonoured{pool="sim"} 1,
// and a second interactive request waits for a slot instead of
// preempting.
func TestAbortUnhonouredThroughGateway(t *testing.T) {
	s := simtest.Start(t, simtest.WithTimeScale(2), simtest.WithConfig(func(c *server.Config) {
		c.Quirks = []string{string(server.QuirkNoAbort)}
	}))
	path := filepath.Join(t.TempDir(), "mesh.yaml")
	mesh := strings.Replace(abortMesh, "ENGINE", strings.TrimPrefix(s.HTTPURL, "http://"), 1)
	if err := os.WriteFile(path, []byte(mesh), 0o644); err != nil {
		t.Fatal(err)
	}
	data, admin := startRun(t, Config{ConfigPath: path, Listen: "127.0.0.1:0", Admin: "127.0.0.1:0",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	const gauge = `llmesh_preemption_abort_unhonoured{pool="sim"}`
	const preempted = `llmesh_scheduler_events_total{event="preempted",pool="sim"}`
	waitMetric := func(what, series string, ok func(float64) bool) float64 {
		t.Helper()
		var v float64
		scrapes.UntilNil(t, what, func() error {
			var found bool
			if v, found = adminMetric(t, admin, series); found && ok(v) {
				return nil
			}
			_, body := get(t, admin+"/metrics")
			return fmt.Errorf("metrics:\n%s", body)
		})
		return v
	}
	waitMetric("gauge exported at 0", gauge, func(v float64) bool { return v == 0 })

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	batch := make(chan error, 2)
	// Long batch streams: the engine keeps the preempted original running
	// for seconds after its release, well past the watch's 1 s, also when a
	// loaded machine slows the gateway's scrapes.
	for i := 0; i < 2; i++ {
		go func() {
			req := mustReq(ctx, data+"/v1/completions", completion(s.Model, 2000))
			res, err := http.DefaultClient.Do(req)
			if err == nil {
				_, err = io.Copy(io.Discard, res.Body)
				res.Body.Close()
			}
			batch <- err
		}()
	}
	waitMetric("both batch streams in flight", `llmesh_scheduler_inflight{pool="sim"}`, func(v float64) bool { return v == 2 })
	interactive := func() {
		t.Helper()
		req := mustReq(context.Background(), data+"/v1/completions", completion(s.Model, 4))
		req.Header.Set("X-Class", "interactive")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("interactive request: %s", res.Status)
		}
	}
	interactive()
	waitMetric("a preemption", preempted, func(v float64) bool { return v >= 1 })
	waitMetric("pool marked as not honouring aborts", gauge, func(v float64) bool { return v == 1 })
	if aborted := simMetric(t, s, "llmesh_sim:requests_aborted_total"); aborted != 0 {
		t.Fatalf("the no-abort sim aborted %v requests", aborted)
	}
	n := waitMetric("preemption count", preempted, func(float64) bool { return true })
	// Both slots are taken again (the preempted stream was resumed); the
	// second interactive request waits for one instead of preempting.
	interactive()
	if v, _ := adminMetric(t, admin, preempted); v != n {
		t.Errorf("preemptions went from %v to %v after the pool was marked", n, v)
	}
	if v, _ := adminMetric(t, admin, gauge); v != 1 {
		t.Errorf("gauge %v after the second request, want 1", v)
	}
	cancel()
	for i := 0; i < 2; i++ {
		<-batch
	}
}

// TestAbortHonouredThroughGateway is the control: the same preemption on
// an engine that stops a request when its client goes leaves the gauge at
// 0 over the rest of both batch streams (seconds, dozens of scrapes).
func TestAbortHonouredThroughGateway(t *testing.T) {
	s := simtest.Start(t, simtest.WithTimeScale(2))
	path := filepath.Join(t.TempDir(), "mesh.yaml")
	mesh := strings.Replace(abortMesh, "ENGINE", strings.TrimPrefix(s.HTTPURL, "http://"), 1)
	if err := os.WriteFile(path, []byte(mesh), 0o644); err != nil {
		t.Fatal(err)
	}
	data, admin := startRun(t, Config{ConfigPath: path, Listen: "127.0.0.1:0", Admin: "127.0.0.1:0",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	const gauge = `llmesh_preemption_abort_unhonoured{pool="sim"}`
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		scrapes.UntilNil(t, what, func() error {
			if ok() {
				return nil
			}
			pre, _ := adminMetric(t, admin, `llmesh_scheduler_events_total{event="preempted",pool="sim"}`)
			return fmt.Errorf("sim aborted %v, gateway preempted %v", simMetric(t, s, "llmesh_sim:requests_aborted_total"), pre)
		})
	}
	batch := make(chan error, 2)
	for i := 0; i < 2; i++ {
		go func() {
			res, err := http.DefaultClient.Do(mustReq(context.Background(), data+"/v1/completions", completion(s.Model, 600)))
			if err == nil {
				_, err = io.Copy(io.Discard, res.Body)
				res.Body.Close()
			}
			batch <- err
		}()
	}
	waitFor("both batch streams in flight", func() bool {
		v, _ := adminMetric(t, admin, `llmesh_scheduler_inflight{pool="sim"}`)
		return v == 2
	})
	req := mustReq(context.Background(), data+"/v1/completions", completion(s.Model, 4))
	req.Header.Set("X-Class", "interactive")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	waitFor("the sim aborts the victim", func() bool { return simMetric(t, s, "llmesh_sim:requests_aborted_total") == 1 })
	for i := 0; i < 2; i++ {
		if err := <-batch; err != nil {
			t.Fatalf("batch stream: %v", err)
		}
	}
	if v, ok := adminMetric(t, admin, gauge); !ok || v != 0 {
		t.Errorf("%s = %v (present %v), want 0", gauge, v, ok)
	}
	if v, _ := adminMetric(t, admin, `llmesh_scheduler_events_total{event="preempted",pool="sim"}`); v != 1 {
		t.Errorf("preempted %v times, want 1", v)
	}
}
