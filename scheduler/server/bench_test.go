package server_test

import (
	"context"
	"testing"

	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/server"
)

// BenchmarkAdmitRelease compares one uncontended admission and release
// through Schedulers (the reloadable per-pool set both hosts use) with the
// same on a bare scheduler.Scheduler: the cost of reloadability.
func BenchmarkAdmitRelease(b *testing.B) {
	cfg := scheduler.Config{
		Pools:   []scheduler.PoolConfig{{Name: "gpu", MaxInflight: 64, Policy: polB(b, "preemptive")}},
		Classes: []scheduler.ClassConfig{{Name: "default"}},
	}
	ctx := context.Background()
	run := func(b *testing.B, a scheduler.Admitter) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				l, err := a.Admit(ctx, scheduler.Request{Pool: "gpu", Class: "default"})
				if err != nil {
					b.Error(err)
					return
				}
				l.Release(scheduler.Done)
			}
		})
	}
	b.Run("scheduler", func(b *testing.B) {
		s, err := scheduler.New(cfg, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		run(b, s)
	})
	b.Run("schedulers", func(b *testing.B) {
		s, err := server.NewSchedulers(cfg, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		run(b, s)
	})
}

func polB(b *testing.B, name string) scheduler.Policy {
	b.Helper()
	p, err := policyLookup(name)
	if err != nil {
		b.Fatal(err)
	}
	return p
}
