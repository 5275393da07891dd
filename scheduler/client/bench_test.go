package client_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/client"
	"github.com/llmesh/llmesh/scheduler/policy/preemptive"
)

// BenchmarkWire is admit → first token → release through a real service
// on loopback, from 8 clients (one connection each), per protocol: one
// multiplexed Session stream per client against one Admit stream per
// admission. Client and service share the process (and its CPUs), so the
// figure is the pair's cost; `llmesh scheduler bench` measures the
// service alone.
func BenchmarkWire(b *testing.B) {
	for _, tc := range []struct {
		name string
		opts client.Options
	}{{"session", client.Options{}}, {"stream", client.Options{StreamPerAdmission: true}}} {
		b.Run(tc.name, func(b *testing.B) {
			svc := startService(b, "127.0.0.1:0", config(1<<20, preemptive.New()))
			var cs []*client.Client
			for range 8 {
				c, err := client.New(svc.addr, tc.opts)
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close()
				cs = append(cs, c)
			}
			var next atomic.Int64
			b.ReportAllocs()
			b.SetParallelism(16) // 16 × GOMAXPROCS requests in flight
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				c := cs[int(next.Add(1))%len(cs)]
				for pb.Next() {
					l, err := c.Admit(context.Background(), scheduler.Request{Pool: "gpu", Class: "interactive", PromptTokens: 100, MaxTokens: 100})
					if err != nil {
						b.Error(err)
						return
					}
					l.Progress(scheduler.Progress{FirstToken: true, Tokens: 1})
					l.Release(scheduler.Done)
				}
			})
		})
	}
}
