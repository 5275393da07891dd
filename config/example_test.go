package config_test

import (
	"path/filepath"
	"testing"

	"github.com/llmesh/llmesh/config"
)

// TestExamplesLoad keeps every sample config in examples/ valid.
func TestExamplesLoad(t *testing.T) {
	files, err := filepath.Glob("../examples/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	for _, f := range files {
		if _, err := config.LoadFile(f); err != nil {
			t.Errorf("%s:\n%v", f, err)
		}
	}
}

func TestExampleMesh(t *testing.T) {
	cfg, err := config.LoadFile("../examples/mesh.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.DefaultClass.Name != "interactive" {
		t.Errorf("default class = %q", cfg.DefaultClass.Name)
	}
	e := cfg.Experiment("policy-ab")
	if e == nil || len(e.Arms) != 2 {
		t.Fatalf("experiment = %+v", e)
	}
	if got := e.Arm("fifo").Scheduler; got.Policy != "fifo" || got.Aging != cfg.Pool("sim").Scheduler.Aging {
		t.Errorf("fifo arm scheduler = %+v", got)
	}
	if r := cfg.Relocation.GRPC; len(r) != 1 || r[0].Metadata != "x-prompt-raw" || r[0].Field != 3 {
		t.Errorf("grpc relocation = %+v", r)
	}
}
