package client_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"

	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/client"
	"github.com/llmesh/llmesh/scheduler/policy/preemptive"
	"github.com/llmesh/llmesh/scheduler/server"
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
		set  bool // the service schedules through pools.Set, as scheduler serve does
	}{
		{"session", client.Options{}, false},
		{"session-set", client.Options{}, true},
		{"stream", client.Options{StreamPerAdmission: true}, false},
	} {
		b.Run(tc.name, func(b *testing.B) {
			addr := startService(b, "127.0.0.1:0", config(1<<20, preemptive.New())).addr
			if tc.set {
				addr = startSetService(b, config(1<<20, preemptive.New()))
			}
			var cs []*client.Client
			for range 8 {
				c, err := client.New(addr, tc.opts)
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

// startSetService serves cfg through pools.Set (server.NewSchedulers) on
// loopback until the benchmark ends.
func startSetService(b *testing.B, cfg scheduler.Config) string {
	b.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	set, err := server.NewSchedulers(cfg, nil)
	if err != nil {
		b.Fatal(err)
	}
	g := grpc.NewServer(server.GRPCOptions()...) // as scheduler serve runs it
	server.New(set, nil).Register(g)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = g.Serve(l)
	}()
	b.Cleanup(func() {
		g.Stop()
		<-done
		_ = set.Close()
	})
	return l.Addr().String()
}
