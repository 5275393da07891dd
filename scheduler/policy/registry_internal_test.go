package policy

import (
	"testing"

	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/policy/fifo"
)

func TestDuplicateNamePanics(t *testing.T) {
	defer func() {
		if r := recover(); r == nil {
			t.Fatal("registering fifo twice did not panic")
		}
	}()
	index([]scheduler.Policy{fifo.New(), fifo.New()})
}

func TestRegistryNames(t *testing.T) {
	if got := len(index(registered)); got != len(registered) || got != 4 {
		t.Fatalf("%d policies indexed, %d registered, want 4", got, len(registered))
	}
}
