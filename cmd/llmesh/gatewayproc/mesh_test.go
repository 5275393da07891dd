package gatewayproc

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/scheduler/pools"
	"github.com/llmesh/llmesh/testkit/proctest"
)

func TestSchedulerConfigKeepsPreemptionTarget(t *testing.T) {
	mesh := strings.Replace(strings.ReplaceAll(meshTmpl, "POOL", "a"), "[A]", "[127.0.0.1:1]", 1)
	mesh = strings.Replace(mesh, "[B]", "[127.0.0.1:2]", 1)
	mesh = strings.Replace(mesh, "scheduler: {policy: priority}",
		"scheduler: {policy: preemptive, preemption: {target: 0.5, min_lower_inflight: 2}}", 1)
	c, err := config.Load([]byte(mesh))
	if err != nil {
		t.Fatalf("config.Load: %v", err)
	}
	sc, err := pools.Config(c)
	if err != nil {
		t.Fatalf("pools.Config: %v", err)
	}
	if len(sc.Pools) != 2 || sc.Pools[0].Name != "a" {
		t.Fatalf("pools: %+v", sc.Pools)
	}
	if got := sc.Pools[0].Preemption.Target; got != 0.5 {
		t.Errorf("pool a preemption target = %v, want 0.5 from the mesh", got)
	}
	if got := sc.Pools[0].Preemption.MinLowerInflight; got != 2 {
		t.Errorf("pool a min_lower_inflight = %d, want 2", got)
	}
	if sc.DefaultClass != "interactive" || len(sc.Classes) != 2 {
		t.Errorf("classes %+v default %q", sc.Classes, sc.DefaultClass)
	}
}

func TestRunLogsBoundAdminAddress(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	defer up.Close()
	logs := &proctest.Buffer{}
	_, admin := startRun(t, Config{Listen: "127.0.0.1:0", Admin: "127.0.0.1:0", Upstream: up.URL,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	bound := strings.TrimPrefix(admin, "http://")
	if !strings.Contains(logs.String(), "admin="+bound) {
		t.Errorf("log does not name the bound admin address %s:\n%s", bound, logs)
	}
	if strings.Contains(logs.String(), "admin=127.0.0.1:0") {
		t.Errorf("log names the requested address, not the bound one:\n%s", logs)
	}
}

func TestRunMeshDropsTrustedMarkerAndAsksForIdentity(t *testing.T) {
	type seen struct{ marker, class, enc string }
	got := make(chan seen, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- seen{r.Header.Get("X-Edge-Verified"), r.Header.Get("X-Class"), r.Header.Get("Accept-Encoding")}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"choices":[{"text":"ok"}]}`)
	}))
	defer up.Close()
	mesh := strings.Replace(strings.ReplaceAll(meshTmpl, "POOL", "a"), "[A]", "["+strings.TrimPrefix(up.URL, "http://")+"]", 1)
	mesh = strings.Replace(mesh, "[B]", "[127.0.0.1:1]", 1)
	mesh += "classification:\n  priority_header:\n    name: x-class\n    trusted_marker: {header: X-Edge-Verified, value: \"k3Y-7f0c2a\"}\n"
	path := filepath.Join(t.TempDir(), "mesh.yaml")
	if err := os.WriteFile(path, []byte(mesh), 0o644); err != nil {
		t.Fatal(err)
	}
	data, _ := startRun(t, Config{ConfigPath: path, Listen: "127.0.0.1:0", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	req := mustReq(context.Background(), data+"/v1/completions", `{"model":"m","prompt":"x"}`)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Edge-Verified", "k3Y-7f0c2a")
	req.Header.Set("X-Class", "batch")
	req.Header.Set("Accept-Encoding", "gzip")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	s := <-got
	if s.marker != "" {
		t.Errorf("upstream got the trusted marker %q; it is a shared secret and must stay at the gateway", s.marker)
	}
	if s.class != "batch" {
		t.Errorf("upstream got x-class %q, want it forwarded unchanged", s.class)
	}
	if s.enc != "identity" {
		t.Errorf("upstream Accept-Encoding = %q, want identity so the stream can be observed", s.enc)
	}
}
