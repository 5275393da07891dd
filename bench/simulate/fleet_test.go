package simulate

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/llmesh/llmesh/bench/result"
	"github.com/llmesh/llmesh/bench/workload"
	"github.com/llmesh/llmesh/bench/workloads"
	"github.com/llmesh/llmesh/scheduler/policy"
)

// A fleet of one engine, one proxy and no hop, its messages queued and
// delivered, is the single host, which acts on each as it is sent: the
// same records, event for event, for every policy and either routing.
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
		sw, items := overSaturation(t, w, &o)
		l, f, got := loopAgainstFleetOfOne(t, sw, items, name, o, clientTimeouts{})
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
// admission reaches the engine two hops after the decision. For either
// routing and either scheduler layout.
func TestFleetHops(t *testing.T) {
	w := testWorkload(t)
	const hop = 5 * time.Millisecond
	for _, c := range [][2]string{{RoutingEndpointAware, SchedulersShared}, {RoutingPool, SchedulersShared},
		{RoutingEndpointAware, SchedulersPerProxy}, {RoutingPool, SchedulersPerProxy}} {
		r := c[0] + " " + c[1]
		o := testOptions()
		o.Engines, o.Proxies, o.Hop, o.Routing, o.Schedulers, o.Duration = 2, 3, hop, c[0], c[1], 20*time.Second
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
		{Options{Schedulers: "each"}, `schedulers: "each"`},
		{Options{Proxies: 8, MaxInflight: 4, Schedulers: SchedulersPerProxy}, "max_inflight 4 is less than"},
		{Options{Engines: 2, Proxies: 9, MaxInflight: 4, Routing: RoutingPool, Schedulers: SchedulersPerProxy}, "max_inflight × engines 8"},
	} {
		if _, err := c.o.withDefaults(w); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want one naming %q", c.o, err, c.want)
		}
	}
}

// Every limit split among the proxies sums to the limit, no two proxies'
// shares of one limit differ by more than one, and over the endpoints the
// extra slots go round: no proxy's total is more than one above another's.
func TestShareSplitsEveryLimit(t *testing.T) {
	for _, c := range [][3]int{{64, 8, 64}, {64, 3, 5}, {5, 4, 7}, {1, 1, 3}, {7, 7, 2}, {10, 16, 4}} {
		n, m, eps := c[0], c[1], c[2]
		totals := make([]int, m)
		for j := range eps {
			sum, lo, hi := 0, n, 0
			for i := range m {
				s := share(n, m, i, j)
				sum, lo, hi = sum+s, min(lo, s), max(hi, s)
				totals[i] += s
			}
			if sum != n || hi-lo > 1 {
				t.Errorf("share(%d, %d, ·, %d): sum %d, shares in [%d, %d]", n, m, j, sum, lo, hi)
			}
		}
		if eps >= m && slices.Max(totals)-slices.Min(totals) > 1 {
			t.Errorf("%d over %d proxies, %d endpoints: totals %v", n, m, eps, totals)
		}
	}
	w := testWorkload(t)
	o, err := Options{Engines: 3, Proxies: 4, MaxInflight: 6, MaxPrefillTokens: 1000, ReserveUrgent: 1, Schedulers: SchedulersPerProxy}.withDefaults(w)
	if err != nil {
		t.Fatal(err)
	}
	pol, _ := policy.Lookup("preemptive")
	shared := fleetConfig(w, pol, o, 0)
	var pool, prefill, reserve int
	eps := make([]int, 3)
	for _, c := range perProxyConfigs(shared, o) {
		p := c.Pools[0]
		pool, prefill, reserve = pool+p.MaxInflight, prefill+p.MaxPrefillTokens, reserve+p.ReserveUrgent
		for j, ep := range p.Endpoints {
			eps[j] += ep.MaxInflight
		}
		if err := c.Validate(); err != nil {
			t.Errorf("a proxy's config: %v", err)
		}
	}
	sp := shared.Pools[0]
	if pool != sp.MaxInflight || prefill != sp.MaxPrefillTokens || reserve != sp.ReserveUrgent || !slices.Equal(eps, []int{6, 6, 6}) {
		t.Errorf("shares sum to pool %d, prefill %d, reserve %d, endpoints %v; shared %d, %d, %d, 6 each",
			pool, prefill, reserve, eps, sp.MaxInflight, sp.MaxPrefillTokens, sp.ReserveUrgent)
	}
	if sp.Endpoints[0].MaxInflight != 6 {
		t.Errorf("splitting changed the shared config: %+v", sp.Endpoints[0])
	}
}

// runItems runs hand-made items (proxy = index mod proxies) through a
// fleet of one engine with static capacity and returns the fleet.
func runItems(t *testing.T, o Options, pol string, items []workload.Item) *fleet {
	t.Helper()
	w := testWorkload(t)
	o.Engines, o.MetricsInterval, o.StaticBounds = 1, -1, true
	o, err := o.withDefaults(w)
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.Lookup(pol)
	if err != nil {
		t.Fatal(err)
	}
	f, err := newFleet(w, p, o)
	if err != nil {
		t.Fatal(err)
	}
	for i := range items {
		items[i].Index = i
	}
	recs, err := f.run(items)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range recs {
		if r.Status != result.StatusOK {
			t.Fatalf("item %d: %s %s", i, r.Status, r.Error)
		}
	}
	return f
}

// With a scheduler per proxy, one proxy queues while another's share of
// the same engine stands empty: four slots, two per proxy; proxy 0 gets
// four long requests, proxy 1 four short ones. Shared, proxy 0's third
// request takes a slot as soon as the first short one ends; per proxy, it
// waits for one of proxy 0's own long ones, well after proxy 1 is done.
func TestPerProxySchedulersQueueBesideRoom(t *testing.T) {
	var items []workload.Item
	for i := range 8 {
		it := workload.Item{Class: 1, PromptTokens: 256, MaxTokens: 400}
		if i%2 == 1 {
			it.MaxTokens = 8
		}
		items = append(items, it)
	}
	// third is how long proxy 0's third request queued, and when proxy 1's
	// first and last requests ended.
	third := func(f *fleet) (queued, first, last time.Duration) {
		first = time.Duration(1 << 62)
		for i, v := range f.reqs {
			if i%2 == 1 {
				first, last = min(first, time.Duration(v.rec.DoneNS)), max(last, time.Duration(v.rec.DoneNS))
			}
		}
		return f.reqs[4].queued, first, last
	}
	o := Options{Proxies: 2, MaxInflight: 4}
	sq, sFirst, _ := third(runItems(t, o, "fifo", slices.Clone(items)))
	o.Schedulers = SchedulersPerProxy
	pq, _, pLast := third(runItems(t, o, "fifo", slices.Clone(items)))
	t.Logf("proxy 0's third request queued %v shared (proxy 1's first end %v), %v per proxy (proxy 1's last end %v)", sq, sFirst, pq, pLast)
	if sq > sFirst {
		t.Errorf("shared: proxy 0's third request queued %v, past proxy 1's first end at %v", sq, sFirst)
	}
	if pq <= pLast {
		t.Errorf("per proxy: proxy 0's third request queued %v, not past proxy 1's last end at %v (its share was free)", pq, pLast)
	}
}

// With a scheduler per proxy, preemption sees only its own proxy's
// requests: proxy 1's share is full of urgent work and proxy 0's of
// preemptible batch work when an urgent request reaches proxy 1. Shared,
// a batch request of proxy 0 is preempted for it; per proxy, nothing is,
// and it waits for one of proxy 1's own to end.
func TestPerProxySchedulersPreemptOnlyTheirOwn(t *testing.T) {
	items := []workload.Item{
		{Class: 1, PromptTokens: 256, MaxTokens: 500}, // proxy 0
		{Class: 0, PromptTokens: 256, MaxTokens: 500}, // proxy 1
		{Class: 1, PromptTokens: 256, MaxTokens: 500},
		{Class: 0, PromptTokens: 256, MaxTokens: 500},
		{Class: 1, PromptTokens: 256, MaxTokens: 8, At: time.Second},
		{Class: 0, PromptTokens: 256, MaxTokens: 8, At: time.Second}, // the urgent one
	}
	o := Options{Proxies: 2, MaxInflight: 4}
	shared := runItems(t, o, "preemptive", slices.Clone(items))
	o.Schedulers = SchedulersPerProxy
	per := runItems(t, o, "preemptive", slices.Clone(items))
	victims := func(f *fleet) (own, other int) {
		for i, v := range f.reqs {
			if v.rec.Preemptions > 0 && i%2 == 1 {
				own++
			} else if v.rec.Preemptions > 0 {
				other++
			}
		}
		return own, other
	}
	so, sx := victims(shared)
	po, px := victims(per)
	t.Logf("urgent request queued %v shared (%d victims at proxy 1, %d at proxy 0), %v per proxy (%d, %d)",
		shared.reqs[5].queued, so, sx, per.reqs[5].queued, po, px)
	if sx == 0 || shared.reqs[5].queued > 100*time.Millisecond {
		t.Errorf("shared: %d victims at proxy 0, urgent request queued %v; want a victim and a short wait", sx, shared.reqs[5].queued)
	}
	if po+px != 0 || per.reqs[5].queued < time.Second {
		t.Errorf("per proxy: %d victims at proxy 1, %d at proxy 0, urgent request queued %v; want none and a wait for its own", po, px, per.reqs[5].queued)
	}
}

// BenchmarkFleet is one run of the speed goal's fleet (64 engines behind
// 8 proxies, the standard workload at 570 req/s, load 1.0, for 10 virtual
// seconds of arrivals) under each policy: the cost that bench simulate
// pays per policy and load, a sixtieth of the goal's 10 minutes.
// overSaturation is w at 1.3 times what o's engine completes (measured
// with a short backlog, o.SaturationRequests set to 300) and its arrivals:
// the load of the fleet-of-one comparisons.
func overSaturation(t *testing.T, w *workload.Workload, o *Options) (*workload.Workload, []workload.Item) {
	t.Helper()
	o.SaturationRequests = 300
	sat, err := saturation(o.prepare(w), *o)
	if err != nil {
		t.Fatal(err)
	}
	sw := o.prepare(w).ScaleRate(1.3 * sat.RPS / naturalRate(w))
	items, err := collect(sw)
	if err != nil {
		t.Fatal(err)
	}
	return sw, items
}

// loopAgainstFleetOfOne runs items through the single host (newLoop) and
// through a fleet of one engine (stepping every step, as the host does)
// under policy name, with clients giving up as clients says, and reports
// where their records differ. It returns both runs and the fleet's records.
func loopAgainstFleetOfOne(t *testing.T, sw *workload.Workload, items []workload.Item, name string, o Options, clients clientTimeouts) (*fleet, *fleet, []result.Record) {
	t.Helper()
	pol, err := policy.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	l, err := newLoop(sw, pol, o)
	if err != nil {
		t.Fatal(err)
	}
	l.clients = clients
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
	f.clients = clients
	got, err := f.run(items)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("%s: fleet of one differs from the loop (-loop +fleet):\n%.3000s", name, d)
	}
	return l, f, got
}

// fleetLoad is the standard workload at rate req/s for d of arrivals
// (timeout: the clients' timeout, 0 the workload's) on the goal's fleet of
// 64 engines behind 8 proxies, with its arrivals.
func fleetLoad(b *testing.B, rate float64, d, timeout time.Duration) (*workload.Workload, Options, []workload.Item) {
	b.Helper()
	w, err := workloads.LoadStandard()
	if err != nil {
		b.Fatal(err)
	}
	if timeout > 0 {
		w.Spec.Timeout = workload.Duration(timeout)
	}
	o, err := Options{Engines: 64, Proxies: 8, Duration: d}.withDefaults(w)
	if err != nil {
		b.Fatal(err)
	}
	sw := o.prepare(w).ScaleRate(rate / naturalRate(w))
	items, err := collect(sw)
	if err != nil {
		b.Fatal(err)
	}
	return sw, o, items
}

func BenchmarkFleet(b *testing.B) {
	sw, o, items := fleetLoad(b, 570, 10*time.Second, 0)
	for _, name := range []string{"fifo", "priority", "preemptive"} {
		b.Run(name, func(b *testing.B) {
			tokens := 0
			for b.Loop() {
				pol, err := policy.Lookup(name)
				if err != nil {
					b.Fatal(err)
				}
				f, err := newFleet(sw, pol, o)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := f.run(items); err != nil {
					b.Fatal(err)
				}
				tokens = int(f.c.computed)
			}
			b.ReportMetric(float64(tokens), "tokens/run")
		})
	}
}

// BenchmarkFleetOverload times the goal's fleet at 5,000 req/s, 8.8 times
// what it completes, for 5 s of arrivals with a 10 s client timeout, so
// that the backlog reaches the timeout within the run and clients give up
// (timeout.go): the overload path of the scheduler (a backlog at risk at
// every step) and of the simulator (withdrawals and cancellations).
func BenchmarkFleetOverload(b *testing.B) {
	sw, o, items := fleetLoad(b, 5000, 5*time.Second, 10*time.Second)
	for _, name := range []string{"fifo", "priority", "preemptive"} {
		b.Run(name, func(b *testing.B) {
			var timeouts int
			for b.Loop() {
				pol, err := policy.Lookup(name)
				if err != nil {
					b.Fatal(err)
				}
				f, err := newFleet(sw, pol, o)
				if err != nil {
					b.Fatal(err)
				}
				f.recordAll = false
				f.clients = newClientTimeouts(sw.Spec.Timeout.D())
				if _, err := f.run(items); err != nil {
					b.Fatal(err)
				}
				timeouts = f.c.timeoutsQueued + f.c.timeoutsRunning
			}
			b.ReportMetric(float64(len(items)), "requests/run")
			b.ReportMetric(float64(timeouts), "timeouts/run")
		})
	}
}

// TestUnreadTokensChangeNothing: under a policy that does not preempt the
// hosts report only each admission's first token (TokensMatter); reporting
// every token, as before, gives the same records, event for event, in the
// single-engine loop and in a fleet with and without a hop.
func TestUnreadTokensChangeNothing(t *testing.T) {
	w := testWorkload(t)
	fleet := func(hop time.Duration) Options {
		o := testOptions()
		o.Engines, o.Proxies, o.Hop = 3, 2, hop
		return o
	}
	// Without a prefill bound nothing in the loop reads even the first
	// token under these policies; with one, the first token frees budget.
	bounded := testOptions()
	bounded.MaxPrefillTokens = 2000
	hosts := []struct {
		name string
		o    Options
	}{{"fleet, hop 0s", fleet(0)}, {"fleet, hop 500µs", fleet(500 * time.Microsecond)}, {"loop", testOptions()}, {"loop, max_prefill_tokens", bounded}}
	for _, name := range []string{"fifo", "priority"} {
		for _, h := range hosts {
			o, err := h.o.withDefaults(w)
			if err != nil {
				t.Fatal(err)
			}
			sw, items := overSaturation(t, w, &o)
			run := func(every bool) []result.Record {
				pol, err := policy.Lookup(name)
				if err != nil {
					t.Fatal(err)
				}
				var matter *bool
				var run func([]workload.Item) ([]result.Record, error)
				if o.fleet() {
					f, err := newFleet(sw, pol, o)
					if err != nil {
						t.Fatal(err)
					}
					matter, run = &f.tokensMatter, f.run
				} else {
					l, err := newLoop(sw, pol, o)
					if err != nil {
						t.Fatal(err)
					}
					matter, run = &l.tokensMatter, l.run
				}
				if *matter {
					t.Fatalf("%s: the machine reads tokens beyond the first", name)
				}
				*matter = every
				recs, err := run(items)
				if err != nil {
					t.Fatal(err)
				}
				return recs
			}
			if d := cmp.Diff(run(true), run(false)); d != "" {
				t.Errorf("%s, %s: records differ (-every token +first only):\n%.3000s", name, h.name, d)
			}
		}
	}
}
