package gatewayproc

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmesh/llmesh/testkit/proctest"
	"github.com/llmesh/llmesh/testkit/wait"
)

// startRun runs Run until the test ends and returns the data and admin
// base URLs.
func startRun(t *testing.T, rc Config) (data, admin string) {
	t.Helper()
	type addrs struct{ data, admin net.Addr }
	ready := make(chan addrs, 1)
	rc.Ready = func(d, a net.Addr) { ready <- addrs{d, a} }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, rc) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	select {
	case a := <-ready:
		data = "http://" + a.data.String()
		if a.admin != nil {
			admin = "http://" + a.admin.String()
		}
		return data, admin
	case err := <-done:
		t.Fatalf("Run ended early: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("Run not ready within 20s")
	}
	return "", ""
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

func TestRunQuickModeAdminAndMetrics(t *testing.T) {
	up := httptest.NewServer(sseUpstream(3, 0))
	defer up.Close()
	data, admin := startRun(t, Config{Listen: "127.0.0.1:0", Admin: "127.0.0.1:0", Upstream: up.URL,
		Policy: "preemptive", MaxInflight: 4, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	for _, p := range []string{"/healthz", "/readyz"} {
		if code, body := get(t, admin+p); code != 200 {
			t.Errorf("%s: %d %q", p, code, body)
		}
	}
	res := post(t, context.Background(), data+"/v1/completions", `{"prompt":"x","stream":true,"model":"m"}`)
	datas, _ := readSSE(t, res)
	res.Body.Close()
	if len(datas) != 5 {
		t.Fatalf("got %d events", len(datas))
	}
	// The record is written after the response ends; poll the endpoint.
	scrapes.UntilNil(t, "the request in the metrics", func() error {
		_, body := get(t, admin+"/metrics")
		if !strings.Contains(body, "gen_ai_server_time_to_first_token") || !strings.Contains(body, `llmesh_class="default"`) {
			return fmt.Errorf("metrics:\n%s", body)
		}
		return nil
	})
}

func TestRunQuickModeFlagErrors(t *testing.T) {
	err := Run(context.Background(), Config{Policy: "lottery", MaxInflight: -1})
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"--upstream", "--listen", "--max-inflight", "--policy"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
}

const meshTmpl = `listeners:
  - name: main
    address: 127.0.0.1:1
    routes:
      - match: {path_prefix: /v1/}
        pool: POOL
pools:
  - name: a
    protocol: openai
    endpoints: [A]
    capacity: {max_inflight: 4}
    scheduler: {policy: priority}
  - name: b
    protocol: openai
    endpoints: [B]
    capacity: {max_inflight: 4}
    scheduler: {policy: priority}
classes:
  - {name: interactive, priority: 0}
  - {name: batch, priority: 10, preemptible: true}
default_class: interactive
`

func TestRunMeshConfigReload(t *testing.T) {
	named := func(name string) *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"choices":[{"text":"`+name+`"}]}`)
		}))
	}
	a, b := named("from-a"), named("from-b")
	defer a.Close()
	defer b.Close()
	mesh := func(pool string) string {
		s := strings.ReplaceAll(meshTmpl, "POOL", pool)
		s = strings.Replace(s, "[A]", "["+strings.TrimPrefix(a.URL, "http://")+"]", 1)
		return strings.Replace(s, "[B]", "["+strings.TrimPrefix(b.URL, "http://")+"]", 1)
	}
	path := filepath.Join(t.TempDir(), "mesh.yaml")
	write := func(s string) {
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	write(mesh("a"))
	logs := &proctest.Buffer{}
	data, _ := startRun(t, Config{ConfigPath: path, Listen: "127.0.0.1:0", Logger: slog.New(slog.NewTextHandler(logs, nil))})
	ask := func() string {
		res := post(t, context.Background(), data+"/v1/completions", `{"prompt":"x"}`)
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		return string(body)
	}
	if got := ask(); !strings.Contains(got, "from-a") {
		t.Fatalf("initial config: %q", got)
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		scrapes.UntilNil(t, what, func() error {
			if !cond() {
				return fmt.Errorf("logs:\n%s", logs)
			}
			return nil
		})
	}
	write(mesh("b"))
	waitFor("reload to pool b", func() bool { return strings.Contains(ask(), "from-b") })

	write(strings.Replace(mesh("a"), "policy: priority", "policy: lottery", 1))
	waitFor("invalid change reported", func() bool { return strings.Contains(logs.String(), "keeping the last good config") })
	if got := ask(); !strings.Contains(got, "from-b") {
		t.Errorf("after an invalid change: %q, want the last good config (pool b)", got)
	}
}

func TestRunMeshRelocatesOversizedHeaderPrompt(t *testing.T) {
	got := make(chan string, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- string(b) + "|" + r.Header.Get("X-Prompt-Raw")
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"choices":[{"text":"ok"}]}`)
	}))
	defer up.Close()
	mesh := strings.Replace(strings.ReplaceAll(meshTmpl, "POOL", "a"), "[A]", "["+strings.TrimPrefix(up.URL, "http://")+"]", 1)
	mesh = strings.Replace(mesh, "[B]", "[127.0.0.1:1]", 1)
	mesh += "relocation:\n  http:\n    - {header: x-prompt-raw, field: prompt, threshold: 16, max: 4096}\n"
	path := filepath.Join(t.TempDir(), "mesh.yaml")
	if err := os.WriteFile(path, []byte(mesh), 0o644); err != nil {
		t.Fatal(err)
	}
	data, _ := startRun(t, Config{ConfigPath: path, Listen: "127.0.0.1:0", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	prompt := strings.TrimSpace(strings.Repeat("long prompt ", 10))
	req := mustReq(context.Background(), data+"/v1/completions", `{"model":"m"}`)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Prompt-Raw", prompt)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if s := <-got; !strings.Contains(s, `"prompt":"`+prompt+`"`) || strings.HasSuffix(s, prompt) {
		t.Errorf("upstream got %q, want the prompt moved from the header into the body", s)
	}
}

// A reload applies scheduler settings live: a request waiting for the
// pool's only slot is admitted as soon as the file raises the capacity,
// while the request holding the slot keeps streaming.
func TestRunReloadAppliesSchedulerSettings(t *testing.T) {
	started := make(chan struct{}, 4)
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"choices":[{"text":"ok"}]}`)
	}))
	defer up.Close()
	defer close(release)
	mesh := func(maxInflight string) string {
		s := strings.Replace(strings.ReplaceAll(meshTmpl, "POOL", "a"), "[A]", "["+strings.TrimPrefix(up.URL, "http://")+"]", 1)
		s = strings.Replace(s, "[B]", "[127.0.0.1:1]", 1)
		return strings.Replace(s, "max_inflight: 4", "max_inflight: "+maxInflight, 1)
	}
	path := filepath.Join(t.TempDir(), "mesh.yaml")
	writeMesh(t, path, mesh("1"))
	logs := &proctest.Buffer{}
	data, admin := startRun(t, Config{ConfigPath: path, Listen: "127.0.0.1:0", Admin: "127.0.0.1:0",
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	codes := make(chan int, 2)
	send := func() {
		go func() {
			res, err := http.Post(data+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"x"}`))
			if err != nil {
				codes <- 0
				return
			}
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			codes <- res.StatusCode
		}()
	}
	waitStart := func(what string) {
		t.Helper()
		select {
		case <-started:
		case <-time.After(20 * time.Second):
			t.Fatalf("%s never reached the engine; logs:\n%s", what, logs)
		}
	}
	send()
	waitStart("the first request")
	send()
	// The second request waits in pool a's queue (the scheduler's gauge
	// says so) and has not reached the engine.
	const queued = `llmesh_scheduler_queued{class="interactive",pool="a"}`
	wait.Poll{Interval: 5 * time.Millisecond}.UntilNil(t, "the second request waiting", func() error {
		if v, _ := adminMetric(t, admin, queued); v != 1 {
			return fmt.Errorf("%s = %v; logs:\n%s", queued, v, logs)
		}
		return nil
	})
	select {
	case <-started:
		t.Fatal("the second request reached the engine past max_inflight 1")
	default:
	}
	writeMesh(t, path, mesh("2"))
	waitStart("the waiting request after the capacity reload")
	wait.UntilNil(t, "the log to show pool a rebuilt", func() error {
		if !strings.Contains(logs.String(), `msg="scheduler pool (re)built" pool=a`) {
			return fmt.Errorf("log:\n%s", logs)
		}
		return nil
	})
	release <- struct{}{}
	release <- struct{}{}
	for range 2 {
		if c := <-codes; c != http.StatusOK {
			t.Errorf("status %d, want 200 for both", c)
		}
	}
}

// A reload whose gateway part does not fit this gateway (the listener it
// serves is gone) is refused whole: the scheduler settings of the same
// change stay unapplied, and requests keep flowing on the running config.
func TestRunReloadRejectedKeepsScheduler(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"choices":[{"text":"ok"}]}`)
	}))
	defer up.Close()
	mesh := func(listener, maxInflight string) string {
		s := strings.Replace(strings.ReplaceAll(meshTmpl, "POOL", "a"), "[A]", "["+strings.TrimPrefix(up.URL, "http://")+"]", 1)
		s = strings.Replace(s, "[B]", "[127.0.0.1:1]", 1)
		s = strings.Replace(s, "name: main", "name: "+listener, 1)
		return strings.Replace(s, "max_inflight: 4", "max_inflight: "+maxInflight, 1)
	}
	path := filepath.Join(t.TempDir(), "mesh.yaml")
	writeMesh(t, path, mesh("main", "1"))
	logs := &proctest.Buffer{}
	data, admin := startRun(t, Config{ConfigPath: path, Listener: "main", Listen: "127.0.0.1:0", Admin: "127.0.0.1:0",
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	const limit = `llmesh_scheduler_limit{pool="a"}`
	if v, ok := adminMetric(t, admin, limit); !ok || v != 1 {
		t.Fatalf("%s = %v (present %v), want 1 from the file", limit, v, ok)
	}
	writeMesh(t, path, mesh("renamed", "3"))
	wait.UntilNil(t, "the reload rejected", func() error {
		if !strings.Contains(logs.String(), "config reload rejected; keeping the running config") {
			return fmt.Errorf("logs:\n%s", logs)
		}
		return nil
	})
	if !strings.Contains(logs.String(), `no listener named \"main\"`) {
		t.Errorf("the rejection does not name the missing listener:\n%s", logs)
	}
	if v, _ := adminMetric(t, admin, limit); v != 1 {
		t.Errorf("after the rejected reload %s = %v, want 1: the scheduler part was applied without the gateway part", limit, v)
	}
	res := post(t, context.Background(), data+"/v1/completions", `{"prompt":"x"}`)
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || !strings.Contains(string(body), "ok") {
		t.Errorf("after the rejected reload: %d %s", res.StatusCode, body)
	}
}
