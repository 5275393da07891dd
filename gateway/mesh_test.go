package gateway

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/llmesh/llmesh/config"
)

func TestSchedulerConfigFromMeshKeepsPreemptionTarget(t *testing.T) {
	mesh := strings.Replace(strings.ReplaceAll(meshTmpl, "POOL", "a"), "[A]", "[127.0.0.1:1]", 1)
	mesh = strings.Replace(mesh, "[B]", "[127.0.0.1:2]", 1)
	mesh = strings.Replace(mesh, "scheduler: {policy: priority}",
		"scheduler: {policy: preemptive, preemption: {target: 0.5, min_lower_inflight: 2}}", 1)
	c, err := config.Load([]byte(mesh))
	if err != nil {
		t.Fatalf("config.Load: %v", err)
	}
	sc, err := SchedulerConfigFromMesh(c)
	if err != nil {
		t.Fatalf("SchedulerConfigFromMesh: %v", err)
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
	logs := &syncBuf{}
	_, admin := startRun(t, RunConfig{Listen: "127.0.0.1:0", Admin: "127.0.0.1:0", Upstream: up.URL,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	bound := strings.TrimPrefix(admin, "http://")
	if !strings.Contains(logs.String(), "admin="+bound) {
		t.Errorf("log does not name the bound admin address %s:\n%s", bound, logs)
	}
	if strings.Contains(logs.String(), "admin=127.0.0.1:0") {
		t.Errorf("log names the requested address, not the bound one:\n%s", logs)
	}
}

