package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/slo"
	"github.com/llmesh/llmesh/testkit/proctest"
)

func TestSLORulesCommand(t *testing.T) {
	out := filepath.Join(t.TempDir(), "rules.yaml")
	var stderr bytes.Buffer
	if err := Main(context.Background(), []string{"slo", "rules", "--config", "../../examples/mesh.yaml", "--out", out}, &bytes.Buffer{}, &stderr); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.LoadFile("../../examples/mesh.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want, _, err := slo.GenerateRules(cfg, "../../examples/mesh.yaml", slo.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("--out file differs from slo.GenerateRules")
	}
	// The pair that can never fire is said, not silently dropped.
	if !strings.Contains(stderr.String(), "note: class batch: no 1h/5m burn-rate alert") {
		t.Errorf("stderr %q lacks the skipped-pair note", stderr.String())
	}
	var dash bytes.Buffer
	if err := Main(context.Background(), []string{"slo", "dashboard", "--config", "../../examples/mesh.yaml"}, &dash, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(dash.String(), `"uid": "llmesh-slo"`) {
		t.Errorf("dashboard on stdout: %.200s", dash.String())
	}
}

func TestSLOCommandErrors(t *testing.T) {
	// A group without a subcommand prints its help, as every group does.
	if err := mainErr("slo"); err != nil {
		t.Errorf("llmesh slo: %v, want its help", err)
	}
	wantUsage(t, mainErr("slo", "alerts"), `unknown command "alerts"`)
	wantUsage(t, mainErr("slo", "rules", "extra"), "unexpected arguments", "--config: required")
	bad := filepath.Join(t.TempDir(), "mesh.yaml")
	if err := os.WriteFile(bad, []byte("classes:\n  - {name: a, priority: 0, attainment_target: 1.5}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	wantUsage(t, mainErr("slo", "rules", "--config", bad), "classes[0].attainment_target: 1.5 must be in (0, 1]")
}

func TestReportSLOErrors(t *testing.T) {
	if err := mainErr("report"); err != nil {
		t.Errorf("llmesh report: %v, want its help", err)
	}
	wantUsage(t, mainErr("report", "bench"), `unknown command "bench"`)
	// Every flag problem at once.
	wantUsage(t, mainErr("report", "slo", "--prometheus", "localhost:9090", "--window", "5s", "--end", "yesterday", "--format", "pdf"),
		`--prometheus: "localhost:9090" is not an http(s) URL`, "--config: required", "--window: 5s must be at least 1m",
		`--end: "yesterday" is not an RFC 3339 time`, `--format: "pdf"`)
	// A Prometheus that does not answer is an error of the run, not of usage.
	err := mainErr("report", "slo", "--prometheus", "http://"+proctest.FreeAddr(t), "--config", "../../examples/mesh.yaml", "--window", "1h")
	if err == nil || !strings.Contains(err.Error(), "prometheus:") {
		t.Fatalf("err = %v, want a prometheus connection error", err)
	}
	if _, usage := err.(*exitCode); usage {
		t.Errorf("unreachable Prometheus reported as a usage error: %v", err)
	}
}
