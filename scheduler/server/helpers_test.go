package server_test

import (
	"context"
	"testing"
	"time"

	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/policy"
	"github.com/llmesh/llmesh/scheduler/server"
)

var policyLookup = policy.Lookup

func pol(t *testing.T, name string) scheduler.Policy {
	t.Helper()
	p, err := policy.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

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

// twoClasses is a config with one pool and an urgent and a batch class.
func twoClasses(t *testing.T, policyName string, maxInflight int) scheduler.Config {
	return scheduler.Config{
		Pools: []scheduler.PoolConfig{{Name: "gpu", MaxInflight: maxInflight, Policy: pol(t, policyName)}},
		Classes: []scheduler.ClassConfig{
			{Name: "urgent", Priority: 0},
			{Name: "batch", Priority: 10},
		},
		DefaultClass: "batch",
	}
}

type admitResult struct {
	name string
	l    scheduler.Lease
	err  error
}

// admitAsync admits req in a goroutine and reports on ch.
func admitAsync(ctx context.Context, s scheduler.Admitter, name string, req scheduler.Request, ch chan<- admitResult) {
	go func() {
		l, err := s.Admit(ctx, req)
		ch <- admitResult{name, l, err}
	}()
}

func next(t *testing.T, ch <-chan admitResult) admitResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(20 * time.Second):
		t.Fatal("no admission result within 20s")
	}
	return admitResult{}
}
