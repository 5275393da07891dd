package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/llmesh/llmesh/api/llmv1"
	"github.com/llmesh/llmesh/sim/simtest"
	"github.com/llmesh/llmesh/testkit/cputime"
)

// BenchmarkStreamsPerCore runs 128 concurrent streaming completions (64
// tokens each) against a real-time sim and measures the process's CPU time
// per second of streaming. The client's work (HTTP, SSE reading) runs in the
// same process and is counted too, so streams/core is a lower bound for the
// server alone. One op is one request.
func BenchmarkStreamsPerCore(b *testing.B) {
	s := simtest.Start(b, simtest.WithTimeScale(1))
	const workers = 128
	body := `{"prompt":"` + strings.Repeat("w ", 100) + `","max_tokens":64,"stream":true}`
	tr := &http.Transport{MaxIdleConnsPerHost: workers}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	var next atomic.Int64
	var streamNs, chunks atomic.Int64
	b.ResetTimer()
	cpu0, wall0 := cputime.Process(), time.Now()
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				t0 := time.Now()
				resp, err := client.Post(s.HTTPURL+"/v1/completions", "application/json", strings.NewReader(body))
				if err != nil {
					b.Error(err)
					return
				}
				sc := bufio.NewScanner(resp.Body)
				for sc.Scan() {
					if strings.HasPrefix(sc.Text(), "data: {") {
						chunks.Add(1)
					}
				}
				resp.Body.Close()
				streamNs.Add(int64(time.Since(t0)))
			}
		}()
	}
	wg.Wait()
	cpu, wall := cputime.Process()-cpu0, time.Since(wall0)
	streamSec := float64(streamNs.Load()) / 1e9
	b.ReportMetric(streamSec/cpu.Seconds(), "streams/core")
	b.ReportMetric(float64(chunks.Load())/wall.Seconds(), "chunks/s")
	b.ReportMetric(streamSec/wall.Seconds(), "concurrent-streams")
	b.ReportMetric(float64(runtime.GOMAXPROCS(0)), "procs")
}

// BenchmarkTimeScaleFidelity compares the TTFT a client measures (wall time
// times the scale, i.e. in engine time) with the engine's own (first token
// minus arrival) for one stream at a time, at several time scales. The
// metric is the mean excess the client sees, in engine milliseconds. One
// op is one request.
func BenchmarkTimeScaleFidelity(b *testing.B) {
	for _, scale := range []float64{1, 10, 100} {
		b.Run(fmt.Sprintf("scale-%g", scale), func(b *testing.B) {
			s := simtest.Start(b, simtest.WithTimeScale(scale))
			body := `{"prompt":"` + strings.Repeat("w ", 1000) + `","max_tokens":4,"stream":true}`
			var excess time.Duration
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				resp, err := http.Post(s.HTTPURL+"/v1/completions", "application/json", strings.NewReader(body))
				if err != nil {
					b.Fatal(err)
				}
				sc := bufio.NewScanner(resp.Body)
				var first time.Duration
				var tr truth
				for sc.Scan() {
					line := sc.Text()
					if !strings.HasPrefix(line, "data: {") {
						continue
					}
					if first == 0 {
						first = time.Since(t0)
					}
					if strings.Contains(line, "llmesh_engine") {
						var v struct {
							E truth `json:"llmesh_engine"`
						}
						_ = json.Unmarshal([]byte(line[6:]), &v)
						tr = v.E
					}
				}
				resp.Body.Close()
				engine := time.Duration(tr.FirstTokenNs - tr.ArrivalNs)
				excess += time.Duration(float64(first)*scale) - engine
			}
			b.ReportMetric(float64(excess.Microseconds())/1e3/float64(b.N), "excess-engine-ms")
		})
	}
}

// BenchmarkGRPCStreamsPerCore is BenchmarkStreamsPerCore over
// llm.v1.Generation on one shared client connection.
func BenchmarkGRPCStreamsPerCore(b *testing.B) {
	s := simtest.Start(b, simtest.WithTimeScale(1))
	conn, err := grpc.NewClient(s.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	c := llmv1.NewGenerationClient(conn)
	const workers = 128
	prompt := strings.Repeat("w ", 100)
	var next atomic.Int64
	var streamNs, msgs atomic.Int64
	b.ResetTimer()
	cpu0, wall0 := cputime.Process(), time.Now()
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				t0 := time.Now()
				st, err := c.Generate(context.Background(), &llmv1.GenerateRequest{Prompt: prompt, MaxTokens: 64})
				if err != nil {
					b.Error(err)
					return
				}
				for {
					if _, err := st.Recv(); err != nil {
						break
					}
					msgs.Add(1)
				}
				streamNs.Add(int64(time.Since(t0)))
			}
		}()
	}
	wg.Wait()
	cpu, wall := cputime.Process()-cpu0, time.Since(wall0)
	streamSec := float64(streamNs.Load()) / 1e9
	b.ReportMetric(streamSec/cpu.Seconds(), "streams/core")
	b.ReportMetric(float64(msgs.Load())/wall.Seconds(), "msgs/s")
	b.ReportMetric(streamSec/wall.Seconds(), "concurrent-streams")
}
