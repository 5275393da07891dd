package gatewayproc

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/llmesh/llmesh/cmd/llmesh/schedserve"
	"github.com/llmesh/llmesh/gateway"
	"github.com/llmesh/llmesh/scheduler/server"
	"github.com/llmesh/llmesh/sim/simtest"
	"github.com/llmesh/llmesh/testkit/proctest"
)

// seededDraw is a concurrency-safe seeded uniform source.
func seededDraw(seed uint64) func() float64 {
	var mu sync.Mutex
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	return func() float64 {
		mu.Lock()
		defer mu.Unlock()
		return r.Float64()
	}
}

// writeMesh replaces the mesh file by a rename, as the watcher expects.
var writeMesh = proctest.Replace

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// Weights split the traffic no header picked, header matches win over the
// draw, and every request is labelled with its arm (header and metrics).
func TestExperimentWeightsHeadersAndMetrics(t *testing.T) {
	s := simtest.Start(t, simtest.WithTimeScale(50))
	path := filepath.Join(t.TempDir(), "mesh.yaml")
	writeMesh(t, path, expMeshFor(s, ""))
	data, admin := startRun(t, Config{ConfigPath: path, Listen: "127.0.0.1:0", Admin: "127.0.0.1:0",
		ArmDraw: seededDraw(7), Logger: quietLog()})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// 3:1 weights over n requests: "fifo" count is Binomial(n, 0.75), mean
	// 150 and standard deviation 6.1 for n = 200; the bound is 5 sigma.
	const n = 200
	counts := map[string]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	work := make(chan struct{})
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range work {
				arm, code := complete(t, ctx, data, s.Model, 2, nil)
				mu.Lock()
				counts[fmt.Sprint(arm, " ", code)]++
				mu.Unlock()
			}
		}()
	}
	for range n {
		work <- struct{}{}
	}
	close(work)
	wg.Wait()
	fifo, prio := counts["fifo 200"], counts["prio 200"]
	if fifo+prio != n {
		t.Fatalf("responses by arm and status: %v, want %d answered 200 by fifo or prio", counts, n)
	}
	t.Logf("weights 3:1, seed 7: fifo %d, prio %d of %d", fifo, prio, n)
	if fifo < 120 || fifo > 180 {
		t.Errorf("fifo took %d of %d requests, want 150 ± 30 (weights 3:1)", fifo, n)
	}

	// A header match wins whatever the draw would pick.
	for range 10 {
		if arm, code := complete(t, ctx, data, s.Model, 2, map[string]string{"x-arm": "prio"}); arm != "prio" || code != 200 {
			t.Fatalf("x-arm: prio went to %q (%d)", arm, code)
		}
	}

	// Metrics carry the arm: prio served its drawn requests plus the ten
	// the header sent.
	want := fmt.Sprintf(`llmesh_arm_requests_total{llmesh_arm="prio",llmesh_class="batch",llmesh_experiment="ab",llmesh_outcome="ok",llmesh_slo_met="true"} %d`, prio+10)
	scrapes.UntilNil(t, want+" in the metrics", func() error {
		_, body := get(t, admin+"/metrics")
		if !strings.Contains(body, want) {
			return fmt.Errorf("metrics:\n%s", metricLines(body, "llmesh_arm_requests_total"))
		}
		return nil
	})
}

func metricLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// The admin API switches all traffic to one arm (headers and weights
// ignored) and back, with control's paths and bodies.
func TestExperimentAdminSwitch(t *testing.T) {
	s := simtest.Start(t, simtest.WithTimeScale(50))
	path := filepath.Join(t.TempDir(), "mesh.yaml")
	writeMesh(t, path, expMeshFor(s, ""))
	data, admin := startRun(t, Config{ConfigPath: path, Listen: "127.0.0.1:0", Admin: "127.0.0.1:0",
		ArmDraw: func() float64 { return 0 }, Logger: quietLog()})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if arm, _ := complete(t, ctx, data, s.Model, 2, nil); arm != "fifo" {
		t.Fatalf("draw 0 went to %q, want fifo", arm)
	}

	call := func(method, url, body string) (int, map[string]any) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json") // adminapi.Guard
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var out map[string]any
		if err := json.NewDecoder(res.Body).Decode(&out); err != nil {
			t.Fatalf("%s %s: %v", method, url, err)
		}
		return res.StatusCode, out
	}
	// A cross-site request as a browser sends it from another site
	// (adminapi.Guard): 403, and traffic stays split.
	xs, err := http.NewRequestWithContext(ctx, http.MethodPost, admin+"/experiments/ab/active?arm=prio", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	xs.Header.Set("Content-Type", "text/plain")
	xs.Header.Set("Origin", "http://evil.example")
	xres, err := http.DefaultClient.Do(xs)
	if err != nil {
		t.Fatal(err)
	}
	xres.Body.Close()
	if xres.StatusCode != http.StatusForbidden {
		t.Fatalf("cross-site switch: %d, want 403", xres.StatusCode)
	}
	if arm, _ := complete(t, ctx, data, s.Model, 2, nil); arm != "fifo" {
		t.Fatalf("after a refused cross-site switch, draw 0 went to %q, want fifo", arm)
	}
	if code, out := call(http.MethodPost, admin+"/experiments/ab/active", `{"arm":"prio"}`); code != 200 || out["version"] != "2" {
		t.Fatalf("switch: %d %v", code, out)
	}
	for _, hdr := range []map[string]string{nil, {"x-arm": "fifo"}} {
		if arm, code := complete(t, ctx, data, s.Model, 2, hdr); arm != "prio" || code != 200 {
			t.Errorf("after the switch, headers %v went to %q (%d), want prio", hdr, arm, code)
		}
	}
	_, list := call(http.MethodGet, admin+"/experiments", "")
	want := []any{map[string]any{"name": "ab", "pool": "sim", "arms": []any{"fifo", "prio"}, "active": "prio", "switched": true}}
	if diff := cmp.Diff(want, list["experiments"]); diff != "" {
		t.Errorf("GET /experiments (-want +got):\n%s", diff)
	}
	for _, bad := range []struct{ url, body, msg string }{
		{"/experiments/nope/active", `{"arm":"prio"}`, "nope"},
		{"/experiments/ab/active", `{"arm":"lottery"}`, "lottery"},
		{"/experiments/ab/active", `{"am":"prio"}`, "body must be"},
		{"/experiments/ab/active", `{}`, "arm: required"},
	} {
		code, out := call(http.MethodPost, admin+bad.url, bad.body)
		if msg, _ := out["error"].(string); code != 400 || !strings.Contains(msg, bad.msg) {
			t.Errorf("POST %s %s: %d %v, want 400 naming %q", bad.url, bad.body, code, out, bad.msg)
		}
	}
	if code, out := call(http.MethodDelete, admin+"/experiments/ab/active", ""); code != 200 || out["version"] != "3" {
		t.Fatalf("clear: %d %v", code, out)
	}
	if arm, _ := complete(t, ctx, data, s.Model, 2, map[string]string{"x-arm": "prio"}); arm != "prio" {
		t.Errorf("after clearing, x-arm: prio went to %q", arm)
	}
	if arm, _ := complete(t, ctx, data, s.Model, 2, nil); arm != "fifo" {
		t.Errorf("after clearing, draw 0 went to %q, want fifo", arm)
	}
}

// A reload switches the active arm and adds an arm; a request streaming
// through the old arm meanwhile finishes untouched.
func TestExperimentReloadSwitchesArms(t *testing.T) {
	s := simtest.Start(t, simtest.WithTimeScale(10))
	path := filepath.Join(t.TempDir(), "mesh.yaml")
	writeMesh(t, path, expMeshFor(s, "    active: fifo\n"))
	logs := &proctest.Buffer{}
	data, _ := startRun(t, Config{ConfigPath: path, Listen: "127.0.0.1:0",
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if arm, _ := complete(t, ctx, data, s.Model, 2, map[string]string{"x-arm": "prio"}); arm != "fifo" {
		t.Fatalf("active fifo: x-arm: prio went to %q", arm)
	}

	// A long stream on the fifo arm, admitted before the reload.
	body := fmt.Sprintf(`{"model":%q,"prompt":"one two three","max_tokens":200,"stream":true,"stream_options":{"include_usage":true}}`, s.Model)
	res := post(t, ctx, data+"/v1/completions", body) //nolint:bodyclose // closed by the reader below and at return
	defer res.Body.Close()
	if got := res.Header.Get(gateway.ArmHeader); got != "fifo" {
		t.Fatalf("long stream on arm %q", got)
	}
	long := make(chan []string, 1)
	go func() {
		datas, _ := readSSE(t, res)
		long <- datas
	}()

	next := strings.Replace(expMeshFor(s, "    active: extra\n"), "arms:\n", "arms:\n      - {name: extra, scheduler: {policy: edf}}\n", 1)
	writeMesh(t, path, next)
	scrapes.UntilNil(t, "the reload to switch to the new arm", func() error {
		if arm, _ := complete(t, ctx, data, s.Model, 2, nil); arm != "extra" {
			return fmt.Errorf("arm %q; log:\n%s", arm, logs)
		}
		return nil
	})
	if !strings.Contains(logs.String(), `pool=sim.arm-extra`) {
		t.Errorf("log does not show the new arm's scheduler pool:\n%s", logs)
	}
	whole := func(what string, tokens int, datas []string) {
		t.Helper()
		if n := len(datas); n < 2 || datas[n-1] != "[DONE]" || !strings.Contains(datas[n-2], fmt.Sprintf(`"completion_tokens":%d`, tokens)) {
			t.Errorf("%s did not finish whole: %d events, last %q", what, n, datas[max(0, n-2):])
		}
	}
	whole("the stream admitted before the reload", 200, <-long)

	// Removing the arm that serves a stream lets the stream finish. It
	// lasts seconds: the reload lands while it runs.
	body = strings.Replace(body, `"max_tokens":200`, `"max_tokens":1000`, 1)
	res2 := post(t, ctx, data+"/v1/completions", body) //nolint:bodyclose // closed by the reader below and at return
	defer res2.Body.Close()
	if got := res2.Header.Get(gateway.ArmHeader); got != "extra" {
		t.Fatalf("second long stream on arm %q", got)
	}
	go func() {
		datas, _ := readSSE(t, res2)
		long <- datas
	}()
	writeMesh(t, path, expMeshFor(s, "    active: prio\n"))
	scrapes.UntilNil(t, "the reload to drop the arm", func() error {
		if arm, _ := complete(t, ctx, data, s.Model, 2, nil); arm != "prio" {
			return fmt.Errorf("arm %q; log:\n%s", arm, logs)
		}
		return nil
	})
	select {
	case <-long:
		t.Fatal("the long stream ended before the reload took effect; the test proves nothing")
	default:
	}
	whole("the stream on the removed arm", 1000, <-long)
}

// With a shared scheduler service, the gateway admits arm traffic under
// the arm pool's name, which the service serves from the same mesh file.
func TestExperimentThroughSchedulerService(t *testing.T) {
	s := simtest.Start(t, simtest.WithTimeScale(50))
	svc, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	svcAdmin, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	src := expMeshFor(s, "") + "scheduler_service: {address: \"" + svc.Addr().String() + "\", failure_mode: fail_closed}\n"
	path := filepath.Join(t.TempDir(), "mesh.yaml")
	writeMesh(t, path, src)
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- schedserve.Run(ctx, svc, schedserve.Config{ConfigPath: path, Admin: svcAdmin, Options: server.Options{Ready: func(net.Addr) { close(ready) }}})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("scheduler service: %v", err)
		}
	}()
	<-ready
	data, _ := startRun(t, Config{ConfigPath: path, Listen: "127.0.0.1:0", Logger: quietLog()})
	rctx, rcancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer rcancel()
	for _, arm := range []string{"prio", "prio", "fifo"} {
		if got, code := complete(t, rctx, data, s.Model, 2, map[string]string{"x-arm": arm}); got != arm || code != 200 {
			t.Fatalf("x-arm: %s went to %q (%d)", arm, got, code)
		}
	}
	// The releases reach the service over the admission streams after the
	// responses ended: poll.
	wants := []string{
		`llmesh_scheduler_events_total{event="done",pool="sim.arm-prio"} 2`,
		`llmesh_scheduler_events_total{event="done",pool="sim.arm-fifo"} 1`,
		`llmesh_scheduler_events_total{event="arrived",pool="sim"} 0`,
	}
	scrapes.UntilNil(t, "the releases in the service metrics", func() error {
		_, body := get(t, "http://"+svcAdmin.Addr().String()+"/metrics")
		for _, want := range wants {
			if !strings.Contains(body, want) {
				return fmt.Errorf("lacks %s:\n%s", want, metricLines(body, "events_total"))
			}
		}
		return nil
	})
}
