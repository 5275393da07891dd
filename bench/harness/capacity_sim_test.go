package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/llmesh/llmesh/bench/result"
	"github.com/llmesh/llmesh/bench/workload"
	"github.com/llmesh/llmesh/sim/simtest"
)

// BenchmarkCapacitySim measures the harness's capacity against the real
// simulated engine in the same process, so the sim's cost per request and
// per chunk counts against the same CPUs — what `llmesh bench run` against
// `llmesh sim` on a shared host sees. The sim runs 100 times faster than
// real time (engine steps of 7–60 ms take 70–600 µs), so queueing in the
// engine stays small and the run measures the harness and the serving
// path. Besides the rates and the schedule lag it reports the process's
// CPU time per request, which moves little with other load on the host.
//
//	taskset -c 0,1 go test -run '^$' -bench CapacitySim -benchtime 1x ./bench/harness/
func BenchmarkCapacitySim(b *testing.B) {
	defer TuneGC()() // as the bench commands run
	for _, tc := range []struct {
		name     string
		rate     float64
		tokens   int
		protocol string
	}{
		{"sse-short/rate=1000", 1000, 8, workload.ProtocolCompletions},
		{"sse-short/rate=1500", 1500, 8, workload.ProtocolCompletions},
		{"sse-short/rate=2000", 2000, 8, workload.ProtocolCompletions},
		{"sse-short/rate=3000", 3000, 8, workload.ProtocolCompletions},
		{"sse-long/rate=200x500", 200, 500, workload.ProtocolCompletions},
		{"sse-long/rate=300x500", 300, 500, workload.ProtocolCompletions},
		{"grpc-short/rate=2000", 2000, 8, workload.ProtocolGRPC},
		{"grpc-long/rate=200x500", 200, 500, workload.ProtocolGRPC},
	} {
		b.Run(tc.name, func(b *testing.B) {
			s := simtest.Start(b, simtest.WithTimeScale(100))
			target := s.HTTPURL
			if tc.protocol == workload.ProtocolGRPC {
				target = s.GRPCAddr
			}
			w := capacityWorkload(b, tc.protocol, s.Model, tc.rate, tc.tokens)
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

// capacityWorkload is a 3-second constant-rate run of one class with
// 16-token prompts, after a 0.5 s warm-up.
func capacityWorkload(b *testing.B, protocol, model string, rate float64, tokens int) *workload.Workload {
	b.Helper()
	s, err := workload.Parse([]byte(fmt.Sprintf(`
protocol: %s
model: %q
duration: 3s
warmup: {duration: 500ms}
arrival: {process: constant, rate: %g}
classes: [{name: a, send_priority: false, prompt_tokens: {value: 16}, output_tokens: {value: %d}}]`, protocol, model, rate, tokens)))
	if err != nil {
		b.Fatal(err)
	}
	s.Default()
	w, err := workload.Compile(s, workload.CompileOptions{})
	if err != nil {
		b.Fatal(err)
	}
	return w
}

// reportCapacity reports the sustained request and chunk rates, the
// schedule lag, the CPU time per request (the whole process: harness
// and target; warm-up requests included in the divisor as in the CPU
// time), the kernel's preemptions of the process's threads per second and
// the time they waited for a core per second of one capacity run, and logs
// them on one line.
//
// The last two are there because preemptions, not the harness's own work,
// bound the p99 lag of long streams: a thread that the kernel takes off
// a core while it holds one of the runtime's Ps stalls that P's goroutines
// (and the goroutine it was about to run next) for up to a kernel time
// slice of several milliseconds. See docs/bench.md.
func reportCapacity(b *testing.B, rep *result.Report, recs []result.Record, u rusage) {
	cpu := u.cpu
	for _, r := range recs {
		if r.Status != result.StatusOK {
			b.Errorf("request %d: %s: %s", r.Index, r.Status, r.Error)
			break
		}
	}
	var chunks int
	var first, last int64 = 1 << 62, 0
	for _, r := range recs {
		if r.Warmup {
			continue
		}
		chunks += len(r.ChunkNS)
		for _, c := range r.ChunkNS {
			first, last = min(first, c), max(last, c)
		}
	}
	chunkRate := 0.0
	if last > first {
		chunkRate = float64(chunks) / (float64(last-first) / 1e9)
	}
	cpuPerReq := 0.0
	if len(recs) > 0 {
		cpuPerReq = float64(cpu.Microseconds()) / float64(len(recs))
	}
	completed := 0.0
	if rep.NumPrompts > 0 {
		completed = float64(rep.Completed) / float64(rep.NumPrompts)
	}
	b.ReportMetric(rep.AchievedRPS, "req/s")
	b.ReportMetric(chunkRate, "chunks/s")
	b.ReportMetric(rep.ScheduleLagMs.P50, "lag-p50-ms")
	b.ReportMetric(rep.ScheduleLagMs.P99, "lag-p99-ms")
	b.ReportMetric(completed, "completed-frac")
	b.ReportMetric(rep.P99TTFTMs, "ttft-p99-ms")
	b.ReportMetric(cpuPerReq, "cpu-us/req")
	preempts := 0.0
	if u.wall > 0 {
		preempts = float64(u.involuntary) / u.wall.Seconds()
	}
	waitMsPerS := 0.0
	if u.wall > 0 {
		waitMsPerS = float64(u.runqWait.Milliseconds()) / u.wall.Seconds()
	}
	b.ReportMetric(preempts, "preempt/s")
	b.ReportMetric(waitMsPerS, "runq-wait-ms/s")
	b.Logf("sustained %.0f req/s, %.0f chunks/s, schedule lag p50 %.3f ms p99 %.3f ms (valid %v), completed %.4f, CPU %.0f µs/request, threads preempted %.0f/s and waiting for a core %.0f ms/s",
		rep.AchievedRPS, chunkRate, rep.ScheduleLagMs.P50, rep.ScheduleLagMs.P99, rep.Valid, completed, cpuPerReq, preempts, waitMsPerS)
}

// rusage is what the process used up to a moment, or between two.
type rusage struct {
	wall time.Duration // monotonic time since the first call (only meaningful as a difference)
	cpu  time.Duration // user+system CPU time of all threads
	// involuntary counts the times the kernel took one of the process's
	// threads off a core while it could still run (ru_nivcsw).
	involuntary int64
	// runqWait is the time the process's threads spent runnable but
	// waiting for a core (the kernel's run_delay, summed over the threads
	// alive at the moment; Linux only, zero elsewhere).
	runqWait time.Duration
}

var usageEpoch = time.Now()

// usage is what this process has used so far.
func usage() rusage {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return rusage{
		wall:        time.Since(usageEpoch),
		cpu:         time.Duration(ru.Utime.Nano() + ru.Stime.Nano()),
		involuntary: int64(ru.Nivcsw), //nolint:unconvert // int32 on some platforms
		runqWait:    runqWait(),
	}
}

// runqWait sums the run_delay field of /proc/self/task/*/schedstat.
func runqWait() time.Duration {
	paths, _ := filepath.Glob("/proc/self/task/*/schedstat")
	var sum time.Duration
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // the thread exited
		}
		f := strings.Fields(string(b))
		if len(f) < 2 {
			continue
		}
		if ns, err := strconv.ParseInt(f[1], 10, 64); err == nil {
			sum += time.Duration(ns)
		}
	}
	return sum
}

func (u rusage) sub(v rusage) rusage {
	return rusage{wall: u.wall - v.wall, cpu: u.cpu - v.cpu, involuntary: u.involuntary - v.involuntary, runqWait: u.runqWait - v.runqWait}
}

// processCPU is the user+system CPU time this process has used.
func processCPU() time.Duration { return usage().cpu }

// BenchmarkRequestCPU measures the CPU time (harness and sim together, the
// whole process) per request and per chunk, which unlike the schedule lag
// hardly depends on what else runs on the host: 8 clients in a closed loop
// send 2,000 requests (16-token prompts, 8 or 128 output tokens) to a sim at
// 10× real time, whose steps (0.7–6 ms) are far apart compared with the
// work per chunk, so every token goes out in its own chunk. (400 requests
// of 128 tokens, to keep the run short.)
//
//	go test -run '^$' -bench RequestCPU -benchtime 1x ./bench/harness/
func BenchmarkRequestCPU(b *testing.B) {
	defer TuneGC()() // as the bench commands run
	for _, tc := range []struct {
		name     string
		tokens   int
		requests int
		protocol string
	}{
		{"sse/tokens=8", 8, 2000, workload.ProtocolCompletions},
		{"sse/tokens=128", 128, 400, workload.ProtocolCompletions},
		{"grpc/tokens=8", 8, 2000, workload.ProtocolGRPC},
	} {
		b.Run(tc.name, func(b *testing.B) {
			s := simtest.Start(b, simtest.WithTimeScale(10))
			target := s.HTTPURL
			if tc.protocol == workload.ProtocolGRPC {
				target = s.GRPCAddr
			}
			spec, err := workload.Parse([]byte(fmt.Sprintf(`
protocol: %s
model: %q
requests: %d
arrival: {process: closed, concurrency: 8}
classes: [{name: a, send_priority: false, prompt_tokens: {value: 16}, output_tokens: {value: %d}}]`, tc.protocol, s.Model, tc.requests, tc.tokens)))
			if err != nil {
				b.Fatal(err)
			}
			spec.Default()
			w, err := workload.Compile(spec, workload.CompileOptions{})
			if err != nil {
				b.Fatal(err)
			}
			for i := 0; i < b.N; i++ {
				cpu0 := processCPU()
				_, recs, err := Run(context.Background(), Options{Workload: w, Target: target})
				if err != nil {
					b.Fatal(err)
				}
				cpu := processCPU() - cpu0
				chunks := 0
				for _, r := range recs {
					if r.Status != result.StatusOK {
						b.Fatalf("request %d: %s: %s", r.Index, r.Status, r.Error)
					}
					chunks += len(r.ChunkNS)
				}
				b.ReportMetric(float64(cpu.Microseconds())/float64(len(recs)), "cpu-us/req")
				b.ReportMetric(float64(chunks)/float64(len(recs)), "chunks/req")
				b.ReportMetric(float64(cpu.Nanoseconds())/1e3/float64(len(recs)+chunks), "cpu-us/event")
			}
		})
	}
}
