package harness

import (
	"context"
	"testing"
	"time"

	"github.com/llmesh/llmesh/bench/benchtest"
	"github.com/llmesh/llmesh/bench/workload"
)

// BenchmarkCapacity measures the harness's own capacity against the
// minimal loopback target: each iteration is a 3-second open-loop run at a
// fixed rate; the metrics are the achieved request and chunk rates and the
// schedule lag. The harness keeps up when lag-p99-ms stays ≤ 1 and
// completed equals sent.
//
//	go test -run '^$' -bench Capacity -benchtime 1x ./bench/harness/
func BenchmarkCapacity(b *testing.B) {
	defer TuneGC()() // as the bench commands run
	for _, tc := range []struct {
		name      string
		rate      float64
		tokens    int
		protocol  string
		chunkWait time.Duration
	}{
		{"sse-short/rate=1000", 1000, 8, workload.ProtocolCompletions, 0},
		{"sse-short/rate=2000", 2000, 8, workload.ProtocolCompletions, 0},
		{"sse-short/rate=3000", 3000, 8, workload.ProtocolCompletions, 0},
		{"sse-short/rate=4000", 4000, 8, workload.ProtocolCompletions, 0},
		{"sse-short/rate=5000", 5000, 8, workload.ProtocolCompletions, 0},
		{"sse-long/rate=200x500", 200, 500, workload.ProtocolCompletions, 0},
		{"sse-long/rate=400x500", 400, 500, workload.ProtocolCompletions, 0},
		{"sse-long/rate=600x500", 600, 500, workload.ProtocolCompletions, 0},
		{"grpc-short/rate=2000", 2000, 8, workload.ProtocolGRPC, 0},
		{"grpc-short/rate=3000", 3000, 8, workload.ProtocolGRPC, 0},
		{"grpc-long/rate=200x500", 200, 500, workload.ProtocolGRPC, 0},
	} {
		b.Run(tc.name, func(b *testing.B) {
			srv := benchtest.Start(b, benchtest.Config{ITL: tc.chunkWait})
			target := srv.HTTPURL
			if tc.protocol == workload.ProtocolGRPC {
				target = srv.GRPCAddr
			}
			w := capacityWorkload(b, tc.protocol, "", tc.rate, tc.tokens)
			for i := 0; i < b.N; i++ {
				u0 := usage()
				rep, recs, err := Run(context.Background(), Options{Workload: w, Target: target})
				if err != nil {
					b.Fatal(err)
				}
				reportCapacity(b, rep, recs, usage().sub(u0))
			}
		})
	}
}
