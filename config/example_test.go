package config_test

import (
	"testing"

	"github.com/llmesh/llmesh/config"
)

func TestExampleMeshLoads(t *testing.T) {
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
}
