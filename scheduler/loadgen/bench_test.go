package loadgen_test

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/client"
	"github.com/llmesh/llmesh/scheduler/loadgen"
	"github.com/llmesh/llmesh/scheduler/server"
)

// BenchmarkOpenLoop is `llmesh scheduler bench` in one process: the
// service (server.Run on examples/mesh-fleet.yaml) and 8 client proxies
// on loopback, an open loop of Poisson arrivals at a fixed rate, b.N
// admissions (so -benchtime 20000x runs 20,000 of them: 4 s at 5,000/s).
// It reports the decision latency's p50, p99 and p99.9 and the p99 of the
// service's queue time, in µs; ns/op is only the run's length over b.N.
// Client and service share the process and its CPUs, so the figures are
// for comparing builds (run them in turns), not the service's own.
func BenchmarkOpenLoop(b *testing.B) {
	mesh, err := config.LoadFile(filepath.Join("..", "..", "examples", "mesh-fleet.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	m, err := loadgen.MixFromMesh(mesh)
	if err != nil {
		b.Fatal(err)
	}
	for _, rate := range []float64{2000, 5000, 10000} {
		b.Run(fmt.Sprintf("rate=%.0f", rate), func(b *testing.B) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			served := make(chan error, 1)
			ready := make(chan struct{})
			go func() {
				served <- server.Run(ctx, l, server.Options{Mesh: mesh, Ready: func(net.Addr) { close(ready) }})
			}()
			defer func() {
				cancel()
				if err := <-served; err != nil {
					b.Error(err)
				}
			}()
			select {
			case <-ready:
			case err := <-served:
				b.Fatal(err)
			}
			var proxies []scheduler.Admitter
			for range 8 {
				c, err := client.New(l.Addr().String(), client.Options{})
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close()
				proxies = append(proxies, c)
			}
			b.ResetTimer()
			rep, err := loadgen.Run(context.Background(), loadgen.Options{
				Proxies: proxies, Rate: rate, Mix: m, Seed: 1,
				Warmup:   200 * time.Millisecond,
				Duration: time.Duration(float64(b.N) / rate * float64(time.Second)),
			})
			b.StopTimer()
			if err != nil {
				b.Fatal(err)
			}
			if rep.Errors > 0 {
				b.Fatalf("%d errors: %v", rep.Errors, rep.ErrorSamples)
			}
			b.ReportMetric(rep.Decision.P50, "p50-µs")
			b.ReportMetric(rep.Decision.P99, "p99-µs")
			b.ReportMetric(rep.Decision.P999, "p99.9-µs")
			b.ReportMetric(rep.Queued.P99, "queued-p99-µs")
			if rep.ScheduleLag != nil {
				// How late the pacer sent against the schedule (a timer
				// alone is ~500 µs late at the median).
				b.ReportMetric(rep.ScheduleLag.P50, "lag-p50-µs")
				b.ReportMetric(rep.ScheduleLag.P99, "lag-p99-µs")
			}
		})
	}
}
