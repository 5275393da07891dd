package simulate

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/llmesh/llmesh/bench/result"
	"github.com/llmesh/llmesh/bench/workload"
	"github.com/llmesh/llmesh/bench/workloads"
	"github.com/llmesh/llmesh/scheduler/policy"
)

// The fleet loop with one engine, one proxy and no hop is the single
// host's loop: the same records, event for event, for every policy and
// either routing.
func TestFleetOfOneIsTheLoop(t *testing.T) {
	w := testWorkload(t)
	for _, c := range [][2]string{{"fifo", RoutingPool}, {"priority", RoutingEndpointAware}, {"preemptive", RoutingEndpointAware}, {"preemptive", RoutingPool}} {
		name := c[0]
		o := testOptions()
		o.Routing = c[1]
		o, err := o.withDefaults(w)
		if err != nil {
			t.Fatal(err)
		}
		o.SaturationRequests = 300
		sat, err := saturation(o.prepare(w), o)
		if err != nil {
			t.Fatal(err)
		}
		sw := o.prepare(w).ScaleRate(1.3 * sat.RPS / naturalRate(w))
		items, err := collect(sw)
		if err != nil {
			t.Fatal(err)
		}
		pol, err := policy.Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		l, err := newLoop(sw, pol, o)
		if err != nil {
			t.Fatal(err)
		}
		want, err := l.run(items)
		if err != nil {
			t.Fatal(err)
		}
		pol, _ = policy.Lookup(name)
		f, err := newFleet(sw, pol, o)
		if err != nil {
			t.Fatal(err)
		}
		f.stepAll = true
		got, err := f.run(items)
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("%s: fleet of one differs from the loop (-loop +fleet):\n%.3000s", name, d)
		}
		if l.c.preemptions != f.c.preemptions || l.c.recomputed != f.c.recomputed || l.c.computed != f.c.computed {
			t.Errorf("%s: counters loop %+v fleet %+v", name, l.c, f.c)
		}
		t.Logf("%s %s: %d records, %d preemptions", name, o.Routing, len(got), f.c.preemptions)
	}
}

// fleetRun evaluates w on a small fleet under routing r.
func fleetRun(t *testing.T, w *workload.Workload, r string, policies []string, load float64, seed int64) map[string]*Run {
	t.Helper()
	o := Options{Engines: 4, Proxies: 4, Routing: r, SaturationRequests: 1000, Duration: 60 * time.Second, Seed: seed}
	res, err := Evaluate(w, policies, []float64{load}, o)
	if err != nil {
		t.Fatal(err)
	}
	if res.Engines != 4 || res.Proxies != 4 || res.Routing != r {
		t.Fatalf("result says %d engines, %d proxies, routing %q", res.Engines, res.Proxies, res.Routing)
	}
	out := map[string]*Run{}
	for _, run := range res.Runs {
		if len(run.Sim.Endpoints) != 4 {
			t.Fatalf("%s: %d endpoints reported", run.Policy, len(run.Sim.Endpoints))
		}
		out[run.Policy] = run
	}
	return out
}

// Endpoint-aware routing must not lose to pool routing on a small fleet
// past saturation, on the figures that matter: the urgent class's P99
// TTFT (an urgent request goes to the engine where room was made for it,
// with the least prefill outstanding) and the other class's output tokens
// (the prefill bound is per engine; pool routing applies one engine's
// bound to the whole fleet and starves batch work under preemptive), and
// no engine runs more than its limit. Over three seeds, so that one P99
// does not decide.
func TestEndpointAwareBeatsPoolRouting(t *testing.T) {
	w, err := workloads.LoadStandard()
	if err != nil {
		t.Fatal(err)
	}
	type sums struct{ p99, tokens [2]float64 } // [endpoint-aware, pool]
	got := map[string]*sums{"priority": {}, "preemptive": {}}
	for seed := int64(1); seed <= 3; seed++ {
		for i, r := range []string{RoutingEndpointAware, RoutingPool} {
			for pol, run := range fleetRun(t, w, r, []string{"priority", "preemptive"}, 1.2, seed) {
				s := got[pol]
				s.p99[i] += run.Classes["interactive"].TTFTMs.P99
				s.tokens[i] += run.Classes["batch"].OutputTokensPerS
				t.Logf("seed %d %s %s: interactive p99 TTFT %.1f ms, batch %.0f tok/s, imbalance %.3f, %d preemptions",
					seed, r, pol, run.Classes["interactive"].TTFTMs.P99, run.Classes["batch"].OutputTokensPerS, run.Sim.Imbalance, run.Sim.Preemptions)
				if r != RoutingEndpointAware {
					continue
				}
				for _, e := range run.Sim.Endpoints {
					if e.RunningPeak > DefaultMaxInflight {
						t.Errorf("endpoint-aware %s: engine %s ran %d sequences, over its limit %d", pol, e.Name, e.RunningPeak, DefaultMaxInflight)
					}
				}
			}
		}
	}
	for _, c := range []struct {
		pol               string
		p99Most, tokLeast float64 // endpoint-aware over pool
	}{
		{"priority", 0.85, 0.99},
		// Pool routing holds one engine's prefill bound for the whole
		// fleet; endpoint-aware keeps well above it (1.48 with the
		// overload release of the derived bounds, 1.6 before it).
		{"preemptive", 1, 1.2},
	} {
		s := got[c.pol]
		if r := s.p99[0] / s.p99[1]; r > c.p99Most {
			t.Errorf("%s: interactive p99 TTFT endpoint-aware / pool = %.2f, want at most %.2f", c.pol, r, c.p99Most)
		}
		if r := s.tokens[0] / s.tokens[1]; r < c.tokLeast {
			t.Errorf("%s: batch output tokens endpoint-aware / pool = %.2f, want at least %.2f", c.pol, r, c.tokLeast)
		}
	}
}

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

// The fleet's text report: the fleet line and the engines table.
func TestFleetTextGolden(t *testing.T) {
	w := testWorkload(t)
	o := testOptions()
	o.Engines, o.Proxies, o.Hop, o.Duration = 2, 2, time.Millisecond, 20*time.Second
	res, err := Evaluate(w, []string{"fifo", "preemptive"}, []float64{1.1}, o)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := WriteText(&buf, res, true); err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "fleet.golden")
	if *update {
		if err := os.WriteFile(golden, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(string(want), buf.String()); d != "" {
		t.Errorf("fleet report (-want +got):\n%s", d)
	}
}

// Every request pays its hops: arrival → scheduler → proxy → engine, and
// the token back to the proxy, so no TTFT is below four hops; and the
// admission reaches the engine two hops after the decision.
func TestFleetHops(t *testing.T) {
	w := testWorkload(t)
	const hop = 5 * time.Millisecond
	for _, r := range []string{RoutingEndpointAware, RoutingPool} {
		o := testOptions()
		o.Engines, o.Proxies, o.Hop, o.Routing, o.Duration = 2, 3, hop, r, 20*time.Second
		res, err := Evaluate(w, []string{"preemptive"}, []float64{0.5}, o)
		if err != nil {
			t.Fatal(err)
		}
		run := res.Runs[0]
		for name, c := range run.Classes {
			if c.TTFTMs.P50 < ms(4*hop) {
				t.Errorf("%s %s: TTFT p50 %.2f ms is below four hops (%v)", r, name, c.TTFTMs.P50, 4*hop)
			}
		}
		b := run.Sim.Breakdown["interactive"]
		if b.QueueMs.P50 < ms(2*hop) || b.EngineWaitMs.P50 < ms(hop) {
			t.Errorf("%s: queue p50 %.2f ms (want ≥ 2 hops), engine wait p50 %.2f ms (want ≥ 1 hop)", r, b.QueueMs.P50, b.EngineWaitMs.P50)
		}
		if n := run.Requests[result.StatusOK]; n != run.NumPrompts {
			t.Errorf("%s: %d of %d ok", r, n, run.NumPrompts)
		}
	}
}

func TestFleetOptionErrors(t *testing.T) {
	w := testWorkload(t)
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{Engines: -1}, "engines: -1"},
		{Options{Proxies: maxEngines + 1}, "proxies:"},
		{Options{Routing: "random"}, `routing: "random"`},
		{Options{Hop: -time.Millisecond}, "hop: -1ms"},
		{Options{Engines: 2, Predictor: PredictTiming}, "predictor: timing"},
	} {
		if _, err := c.o.withDefaults(w); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want one naming %q", c.o, err, c.want)
		}
	}
}
