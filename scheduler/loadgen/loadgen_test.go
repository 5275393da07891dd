package loadgen_test

import (
	"context"
	"flag"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	"google.golang.org/grpc"

	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/client"
	"github.com/llmesh/llmesh/scheduler/loadgen"
	"github.com/llmesh/llmesh/scheduler/policy/fifo"
	"github.com/llmesh/llmesh/scheduler/server"
	"github.com/llmesh/llmesh/testkit/wait"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func cfg(limit int) scheduler.Config {
	return scheduler.Config{
		Pools:   []scheduler.PoolConfig{{Name: "gpu", MaxInflight: limit, Policy: fifo.New()}},
		Classes: []scheduler.ClassConfig{{Name: "a"}, {Name: "b", Priority: 5}},
	}
}

var mix = loadgen.Mix{Pools: []string{"gpu"}, Classes: []string{"a", "b"}, PromptTokens: [2]int{1, 100}, MaxTokens: [2]int{1, 10}}

// service starts a real scheduler service on loopback and returns n
// clients of it, one connection each.
func service(t *testing.T, limit, n int) (*scheduler.Scheduler, []scheduler.Admitter) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sched, err := scheduler.New(cfg(limit), nil)
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	server.New(sched, nil).Register(g)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = g.Serve(l)
	}()
	var proxies []scheduler.Admitter
	var clients []*client.Client
	for range n {
		c, err := client.New(l.Addr().String(), client.Options{})
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
		proxies = append(proxies, c)
	}
	t.Cleanup(func() {
		for _, c := range clients {
			c.Close()
		}
		g.Stop()
		<-done
		sched.Close()
	})
	return sched, proxies
}

// Closed loop through the real service: every measured admission has a
// latency sample, nothing fails, and the service saw at least as many
// admissions (the warm-up's too) and released them all.
func TestRunClosedLoop(t *testing.T) {
	sched, proxies := service(t, 64, 3)
	rep, err := loadgen.Run(context.Background(), loadgen.Options{
		Proxies: proxies, Inflight: 6, Warmup: 50 * time.Millisecond, Duration: 300 * time.Millisecond, Mix: mix,
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Admissions == 0 || rep.Errors != 0 || rep.Rejected != 0 || rep.Decision.N != int(rep.Admissions) || rep.Sent != rep.Admissions {
		t.Fatalf("report %+v: want admissions, each with a latency sample, and no failure", rep)
	}
	if rep.Mode != "closed" || rep.ScheduleLag != nil || rep.DurationS != 0.3 {
		t.Errorf("mode %q, lag %v, duration %v", rep.Mode, rep.ScheduleLag, rep.DurationS)
	}
	if got := math.Abs(rep.AdmissionsPerS - float64(rep.Admissions)/0.3); got > 1e-6 {
		t.Errorf("admissions/s %v for %d admissions in 0.3 s", rep.AdmissionsPerS, rep.Admissions)
	}
	waitIdle(t, sched)
	st := sched.Stats()[0]
	if st.Admitted < rep.Admissions || st.Done != st.Admitted {
		t.Errorf("service: %d admitted, %d done; the run counted %d", st.Admitted, st.Done, rep.Admissions)
	}
}

// Open loop with uniform arrivals sends exactly its schedule: every
// arrival of the measured window is admitted, rejected, failed or
// dropped, and the count does not depend on how fast the service is.
func TestRunOpenLoopSendsTheSchedule(t *testing.T) {
	_, proxies := service(t, 64, 2)
	const rate, d = 1000.0, 400 * time.Millisecond
	rep, err := loadgen.Run(context.Background(), loadgen.Options{
		Proxies: proxies, Rate: rate, Arrivals: "uniform", Duration: d, Mix: mix,
	})
	if err != nil {
		t.Fatal(err)
	}
	// Arrivals every 1 ms from 1 ms after the start, the last before the
	// end, to the two proxies in turn.
	const want = 399
	if got := float64(rep.Sent + rep.Dropped); got != want || rep.Sent != rep.Admissions+rep.Rejected+rep.Errors {
		t.Fatalf("%v requests accounted for (%+v), want %v", got, rep, want)
	}
	if rep.Errors != 0 || rep.ScheduleLag == nil || rep.ScheduleLag.N != int(rep.Admissions) {
		t.Fatalf("report %+v", rep)
	}
}

// The open loop reports the latency from the Admit call (Decision) apart
// from that from the scheduled send (FromScheduled, never less), and how
// late each send was against the schedule (ScheduleLag, one per send). How
// late is a speed figure, so it is a benchmark's metric
// (BenchmarkOpenLoop's lag-p50-µs: well under a millisecond on an idle
// host, where a timer alone wakes up ~500 µs late), not asserted here.
func TestOpenLoopSendsOnTime(t *testing.T) {
	_, proxies := service(t, 64, 2)
	rep, err := loadgen.Run(context.Background(), loadgen.Options{
		Proxies: proxies, Rate: 2000, Arrivals: "poisson", Duration: 500 * time.Millisecond, Mix: mix,
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep.ScheduleLag == nil || rep.FromScheduled == nil || rep.ScheduleLag.N < 500 || rep.FromScheduled.N != rep.Decision.N {
		t.Fatalf("report %+v", rep)
	}
	if rep.FromScheduled.P50 < rep.Decision.P50 || rep.FromScheduled.Max < rep.Decision.Max {
		t.Errorf("from scheduled %+v is less than decision %+v", *rep.FromScheduled, rep.Decision)
	}
	if rep.ScheduleLag.P50 < 0 || rep.ScheduleLag.Max < rep.ScheduleLag.P50 {
		t.Errorf("schedule lag %+v is not a lateness distribution", *rep.ScheduleLag)
	}
	t.Logf("schedule lag p50 %.0f µs, p99 %.0f µs (a speed figure: BenchmarkOpenLoop)", rep.ScheduleLag.P50, rep.ScheduleLag.P99)
}

// The open loop times a request from its scheduled send, so time spent
// queued behind a full pool counts; the closed loop at the same capacity
// never queues. A pool of one held 20 ms per request, offered 100/s
// (twice what it serves), queues ever longer.
func TestOpenLoopCountsQueueing(t *testing.T) {
	sched, err := scheduler.New(cfg(1), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sched.Close()
	base := loadgen.Options{Proxies: []scheduler.Admitter{sched}, Hold: 20 * time.Millisecond, Duration: 500 * time.Millisecond, Mix: mix}
	open := base
	open.Rate, open.Arrivals = 100, "uniform"
	ro, err := loadgen.Run(context.Background(), open)
	if err != nil {
		t.Fatal(err)
	}
	closed := base
	closed.Inflight = 1
	rc, err := loadgen.Run(context.Background(), closed)
	if err != nil {
		t.Fatal(err)
	}
	// Open: the last of ~50 arrivals waits for ~25 before it: ≥ 200 ms
	// even on an idle machine. Closed: one in flight, nothing waits.
	if ro.Decision.Max < 150_000 {
		t.Errorf("open loop: max decision %v µs, want the queueing (≥ 150 ms) counted", ro.Decision.Max)
	}
	if rc.Decision.P50 > ro.Decision.P50/10 {
		t.Errorf("closed loop p50 %v µs against open loop %v µs: the closed loop should not queue", rc.Decision.P50, ro.Decision.P50)
	}
}

func waitIdle(t *testing.T, s *scheduler.Scheduler) {
	t.Helper()
	wait.Until(t, "every lease released", func() bool { return s.Stats()[0].InFlight == 0 })
}

func TestValidate(t *testing.T) {
	sched, err := scheduler.New(cfg(1), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sched.Close()
	p := []scheduler.Admitter{sched, sched}
	for _, tc := range []struct {
		o    loadgen.Options
		want []string
	}{
		{loadgen.Options{}, []string{"proxies: at least one", "rate or inflight: one must be positive", "duration: 0s must be positive", "mix: needs"}},
		{loadgen.Options{Proxies: p, Rate: 10, Inflight: 3, Duration: time.Second, Mix: mix}, []string{"rate and inflight: set one"}},
		{loadgen.Options{Proxies: p, Inflight: 1, Duration: time.Second, Mix: mix}, []string{"inflight: 1 is fewer than the 2 proxies"}},
		{loadgen.Options{Proxies: p, Rate: -1, Arrivals: "bursty", Duration: time.Second, Hold: -time.Second, Mix: mix},
			[]string{"rate: -1 must not be negative", `arrivals: "bursty" must be poisson or uniform`, "hold: -1s must not be negative"}},
		{loadgen.Options{Proxies: p, Rate: 1, Duration: time.Second, Mix: loadgen.Mix{Pools: []string{"gpu"}, Classes: []string{"a"}, MaxTokens: [2]int{5, 1}}},
			[]string{"mix.max_tokens: [5, 1] is not a range"}},
	} {
		err := tc.o.Validate()
		for _, w := range tc.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("Validate(%+v) = %v, want it to say %q", tc.o, err, w)
			}
		}
	}
}

func TestGaps(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const rate, n = 5000.0, 200_000
	for _, kind := range []string{"poisson", "uniform"} {
		gap := loadgen.Gaps(kind, rate, rng)
		var sum, sq float64
		for range n {
			g := gap().Seconds()
			sum += g
			sq += g * g
		}
		mean := sum / n
		cv := math.Sqrt(sq/n-mean*mean) / mean
		if math.Abs(mean*rate-1) > 0.01 {
			t.Errorf("%s: mean gap %v s, want 1/%v", kind, mean, rate)
		}
		// Exponential gaps have a coefficient of variation of 1.
		if want := map[string]float64{"poisson": 1, "uniform": 0}[kind]; math.Abs(cv-want) > 0.02 {
			t.Errorf("%s: coefficient of variation %v, want %v", kind, cv, want)
		}
	}
}

func TestMixFromMesh(t *testing.T) {
	c, err := config.LoadFile(filepath.Join("..", "..", "examples", "mesh-fleet.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := loadgen.MixFromMesh(c)
	if err != nil {
		t.Fatal(err)
	}
	want := loadgen.Mix{Pools: []string{"gpu"}, Classes: []string{"premium", "standard", "bulk"}, PromptTokens: [2]int{64, 2048}, MaxTokens: [2]int{16, 512}}
	if diff := cmp.Diff(want, m); diff != "" {
		t.Errorf("mix (-want +got):\n%s", diff)
	}
}

func TestReportText(t *testing.T) {
	for name, r := range map[string]loadgen.Report{
		"open": {Mode: "open", Proxies: 8, TargetRate: 40000, Arrivals: "poisson", DurationS: 10, Sent: 399_872, Admissions: 399_871, AdmissionsPerS: 39_987.1,
			Decision:      loadgen.Quantiles{N: 399_871, P50: 84.2, P99: 612.5, P999: 1480, Max: 5210},
			Queued:        loadgen.Quantiles{N: 399_871, P50: 1, P99: 150, P999: 900, Max: 4000},
			FromScheduled: &loadgen.Quantiles{N: 399_871, P50: 95, P99: 700, P999: 1700, Max: 5300}, ScheduleLag: &loadgen.Quantiles{N: 399_871, P50: 9, P99: 120, P999: 400, Max: 2100},
			Errors: 1, ErrorSamples: []string{"scheduler: unavailable: connection refused"},
			ServiceCPU: &loadgen.ServiceCPU{Seconds: 7.25, PerAdmissionUS: 18.13}},
		"closed": {Mode: "closed", Proxies: 8, Inflight: 128, DurationS: 10, Sent: 612_007, Admissions: 612_004, AdmissionsPerS: 61_200.4,
			Decision: loadgen.Quantiles{N: 612_004, P50: 1500, P99: 4100, P999: 7000, Max: 12000}, Rejected: 3,
			ServiceCPU: &loadgen.ServiceCPU{Error: "service CPU: GET http://127.0.0.1:9/metrics: connection refused"}},
	} {
		var b strings.Builder
		if err := r.WriteText(&b); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join("testdata", name+".golden")
		if *update {
			if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(string(want), b.String()); diff != "" {
			t.Errorf("%s (-want +got):\n%s", path, diff)
		}
	}
}
