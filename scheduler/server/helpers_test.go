package server_test

import (
	"testing"

	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/policy"
	"github.com/llmesh/llmesh/scheduler/server"
)

var policyLookup = policy.Lookup

// newSchedulers builds cfg's pools, closed when the test ends.
func newSchedulers(t *testing.T, cfg scheduler.Config) *server.Schedulers {
	t.Helper()
	s, err := server.NewSchedulers(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}
