package simulate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/llmesh/llmesh/bench/result"
	"github.com/llmesh/llmesh/bench/trace"
	"github.com/llmesh/llmesh/bench/workload"
	"github.com/llmesh/llmesh/bench/workloads"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/policy"
)

// testYAML is a small two-class workload in the shape of the standard one
// (urgent short requests, long preemptible ones), short enough for -race.
const testYAML = `
name: vt-test
profile: llama3-8b-h200
seed: 7
duration: 40s
warmup: {duration: 2s}
arrival: {process: poisson, rate: 5}
classes:
  - name: interactive
    priority: 0
    share: 0.2
    slo: {ttft: 500ms, tpot: 30ms}
    prompt_tokens: {kind: lognormal, median: 512, sigma: 0.5, min: 16, max: 2048}
    output_tokens: {kind: lognormal, median: 96, sigma: 0.4, min: 8, max: 256}
  - name: batch
    priority: 10
    share: 0.8
    slo: {ttft: 5s, tpot: 100ms}
    prompt_tokens: {kind: lognormal, median: 1536, sigma: 0.5, min: 128, max: 4096}
    output_tokens: {kind: lognormal, median: 256, sigma: 0.4, min: 32, max: 512}
`

func testWorkload(t testing.TB) *workload.Workload {
	t.Helper()
	s, err := workload.Parse([]byte(testYAML))
	if err != nil {
		t.Fatal(err)
	}
	s.Default()
	w, err := workload.Compile(s, workload.CompileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// testOptions keep the pool small so that a short run saturates it.
func testOptions() Options {
	return Options{MaxInflight: 16, SaturationRequests: 300}
}

func TestDeterministic(t *testing.T) {
	w := testWorkload(t)
	var out [2]bytes.Buffer
	for i := range out {
		o := testOptions()
		if i == 1 {
			o.Parallel = 1 // one run after the other: the same result
		}
		res, err := Evaluate(w, []string{"fifo", "preemptive"}, []float64{1.1}, o)
		if err != nil {
			t.Fatal(err)
		}
		if err := WriteJSON(&out[i], res); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(out[0].Bytes(), out[1].Bytes()) {
		t.Fatal("two evaluations with the same seed differ")
	}
	o := testOptions()
	o.Seed = 8
	res, err := Evaluate(w, []string{"fifo", "preemptive"}, []float64{1.1}, o)
	if err != nil {
		t.Fatal(err)
	}
	var other bytes.Buffer
	if err := WriteJSON(&other, res); err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(out[0].Bytes(), other.Bytes()) {
		t.Fatal("a different seed gave the same result")
	}
}

// TestPreemptionProtectsUrgentClass is the point of the preemptive policy:
// past saturation fifo lets the urgent class queue behind batch work,
// priority serves it first but only as slots free up, and preemptive makes
// room at once, paying with a little recomputed work.
func TestParallelMustNotBeNegative(t *testing.T) {
	o := testOptions()
	o.Parallel = -1
	_, err := Evaluate(testWorkload(t), []string{"fifo"}, []float64{1}, o)
	if err == nil || !strings.Contains(err.Error(), "parallel: -1") {
		t.Fatalf("err = %v, want one naming parallel: -1", err)
	}
}

func TestPreemptionProtectsUrgentClass(t *testing.T) {
	w := testWorkload(t)
	res, err := Evaluate(w, []string{"fifo", "priority", "preemptive"}, []float64{0.05, 1.3}, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	byKey := map[string]*Run{}
	for _, r := range res.Runs {
		byKey[fmt.Sprintf("%s@%g", r.Policy, r.Load)] = r
	}
	p99 := func(k string) float64 { return byKey[k].Classes["interactive"].TTFTMs.P99 }
	idle, fifo, prio, pre := p99("fifo@0.05"), p99("fifo@1.3"), p99("priority@1.3"), p99("preemptive@1.3")
	t.Logf("interactive p99 TTFT: unloaded %.1f ms; at 1.3: fifo %.1f, priority %.1f, preemptive %.1f ms", idle, fifo, prio, pre)
	if fifo < 10*idle {
		t.Errorf("fifo at load 1.3 is not overloaded: p99 %.1f ms vs unloaded %.1f ms", fifo, idle)
	}
	if pre > fifo/5 || pre > prio {
		t.Errorf("preemptive p99 %.1f ms: want far below fifo's %.1f and at most priority's %.1f", pre, fifo, prio)
	}
	if byKey["preemptive@1.3"].Sim.Preemptions == 0 {
		t.Error("preemptive did not preempt under overload")
	}
	for _, k := range []string{"fifo@1.3", "priority@1.3", "fifo@0.05", "preemptive@0.05"} {
		if n := byKey[k].Sim.Preemptions; n != 0 {
			t.Errorf("%s preempted %d times", k, n)
		}
	}
	pr := byKey["preemptive@1.3"]
	if pr.Sim.RecomputedTokens == 0 || pr.RecomputedTokensFraction <= 0 || pr.Sim.RecomputedOfComputed <= 0 {
		t.Errorf("preemptions without recomputed tokens: %+v", pr.Sim)
	}
	if pr.Sim.Requeues+pr.Sim.Continuations != pr.Sim.Preemptions {
		t.Errorf("requeues %d + continuations %d != preemptions %d", pr.Sim.Requeues, pr.Sim.Continuations, pr.Sim.Preemptions)
	}
	// Every request ends with exactly its requested output, continued or
	// not: a continuation generates only the remaining tokens.
	for _, r := range res.Runs {
		if n := r.Requests[result.StatusOK]; n != r.NumPrompts {
			t.Errorf("%s at %g: %d of %d ok (%v)", r.Policy, r.Load, n, r.NumPrompts, r.Requests)
		}
	}
}

// The admission bounds keep the urgent class out of the scheduler queue
// (reserve_urgent) and shorten the engine steps it waits for
// (max_prefill_tokens), without preempting; the load factors keep their
// meaning (saturation is measured without the bounds).
func TestAdmissionBounds(t *testing.T) {
	w := testWorkload(t)
	plain, err := Evaluate(w, []string{"priority"}, []float64{1.3}, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	o := testOptions()
	o.ReserveUrgent, o.MaxPrefillTokens = 2, 1024
	bounded, err := Evaluate(w, []string{"priority"}, []float64{1.3}, o)
	if err != nil {
		t.Fatal(err)
	}
	if plain.Saturation.RPS != bounded.Saturation.RPS {
		t.Errorf("saturation %v with the bounds, %v without", bounded.Saturation.RPS, plain.Saturation.RPS)
	}
	p, b := plain.Runs[0], bounded.Runs[0]
	if bounded.Pool.MaxPrefillTokens != 1024 || bounded.Pool.ReserveUrgent != 2 {
		t.Errorf("pool info %+v", bounded.Pool)
	}
	pb, bb := p.Sim.Breakdown["interactive"], b.Sim.Breakdown["interactive"]
	t.Logf("interactive p99 TTFT %.1f ms → %.1f ms; queue p99 %.1f → %.1f; engine wait p99 %.1f → %.1f; prefill p99 %.1f → %.1f",
		p.Classes["interactive"].TTFTMs.P99, b.Classes["interactive"].TTFTMs.P99, pb.QueueMs.P99, bb.QueueMs.P99,
		pb.EngineWaitMs.P99, bb.EngineWaitMs.P99, pb.PrefillMs.P99, bb.PrefillMs.P99)
	if bb.QueueMs.P99 >= pb.QueueMs.P99 || b.Classes["interactive"].TTFTMs.P99 >= p.Classes["interactive"].TTFTMs.P99 {
		t.Errorf("the bounds did not shorten the urgent class's queueing or TTFT")
	}
	for _, x := range []Breakdown{pb, bb} {
		if x.EngineWaitMs.Max > x.UpstreamMs.Max || x.PrefillMs.Max > x.UpstreamMs.Max || x.PrefillMs.P50 <= 0 {
			t.Errorf("engine wait and prefill are not parts of upstream: %+v", x)
		}
	}
	if b.Sim.Preemptions != 0 {
		t.Errorf("priority preempted %d times", b.Sim.Preemptions)
	}
}

// With the late handoff a request admitted because a first token freed
// prefill budget reaches the engine a step later: handing batch prefill
// over one request at a time makes each batch request wait for the step
// the engine started without it, which the instant model does not see.
func TestLateHandoff(t *testing.T) {
	w := testWorkload(t)
	wait := func(late bool) Quantiles {
		o := testOptions()
		o.MaxPrefillTokens, o.LateHandoff = 1, late
		res, err := Evaluate(w, []string{"priority"}, []float64{1.3}, o)
		if err != nil {
			t.Fatal(err)
		}
		return res.Runs[0].Sim.Breakdown["batch"].EngineWaitMs
	}
	instant, late := wait(false), wait(true)
	t.Logf("batch engine wait: instant handoff p50 %.1f ms p90 %.1f; late p50 %.1f p90 %.1f", instant.P50, instant.P90, late.P50, late.P90)
	if late.P50 <= instant.P50 {
		t.Errorf("late handoff did not delay the serial batch prefill: p50 %.1f vs %.1f ms", late.P50, instant.P50)
	}
}

func mustPolicy(t *testing.T, name string) scheduler.Policy {
	t.Helper()
	p, err := policy.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func preemptTarget(x float64) scheduler.PreemptionConfig {
	return scheduler.PreemptionConfig{MinLowerInflight: 1, MaxPerRequest: 1, Target: x}
}

// TestContinuationOutput checks the gateway model request by request: a
// request preempted mid-stream keeps the tokens its client got, and its
// continuation adds exactly the rest.
func TestContinuationOutput(t *testing.T) {
	w := testWorkload(t).ScaleRate(1.5)
	o, err := testOptions().withDefaults(w)
	if err != nil {
		t.Fatal(err)
	}
	pol := mustPolicy(t, "preemptive")
	items, err := collect(o.prepare(w))
	if err != nil {
		t.Fatal(err)
	}
	l, err := newLoop(w, pol, o)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := l.run(items)
	if err != nil {
		t.Fatal(err)
	}
	if l.c.continuations == 0 {
		t.Fatalf("no mid-stream preemption to check (%d preemptions)", l.c.preemptions)
	}
	var preempted int
	for _, r := range recs {
		if r.Status != result.StatusOK || r.OutputTokens != r.MaxTokens || len(r.ChunkNS) != r.MaxTokens {
			t.Fatalf("request %d: status %s, %d of %d tokens, %d chunks", r.Index, r.Status, r.OutputTokens, r.MaxTokens, len(r.ChunkNS))
		}
		for i := 1; i < len(r.ChunkNS); i++ {
			if r.ChunkNS[i] <= r.ChunkNS[i-1] {
				t.Fatalf("request %d: token times go backwards at %d", r.Index, i)
			}
		}
		if r.Preemptions > 0 {
			preempted++
			if r.RecomputedTokens <= 0 {
				t.Errorf("request %d preempted %d times with no recomputed tokens", r.Index, r.Preemptions)
			}
		}
		if r.Preemptions > o.Preemption.MaxPerRequest {
			t.Errorf("request %d preempted %d times, guard is %d", r.Index, r.Preemptions, o.Preemption.MaxPerRequest)
		}
	}
	if preempted == 0 {
		t.Error("no record carries its preemptions")
	}
}

func TestJSONShape(t *testing.T) {
	w := testWorkload(t)
	res, err := Evaluate(w, []string{"priority"}, []float64{0.5}, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := WriteJSON(&buf, res); err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	dec := json.NewDecoder(&buf)
	if err := dec.Decode(&doc); err != nil {
		t.Fatal(err)
	}
	if dec.More() {
		t.Fatal("more than one JSON value")
	}
	runs, _ := doc["runs"].([]any)
	if len(runs) != 1 {
		t.Fatalf("runs: %v", doc["runs"])
	}
	run := runs[0].(map[string]any)
	if run["policy"] != "priority" || run["load"] != 0.5 {
		t.Errorf("policy %v load %v", run["policy"], run["load"])
	}
	if _, ok := run["recomputed_tokens_fraction"].(float64); !ok {
		t.Error("recomputed_tokens_fraction missing")
	}
	classes, _ := run["classes"].(map[string]any)
	for _, name := range []string{"interactive", "batch"} {
		c, ok := classes[name].(map[string]any)
		if !ok {
			t.Fatalf("classes.%s missing", name)
		}
		for _, m := range []string{"ttft_ms", "tpot_ms"} {
			q, _ := c[m].(map[string]any)
			for _, p := range []string{"p50", "p90", "p99"} {
				if v, ok := q[p].(float64); !ok || !(v > 0) {
					t.Errorf("classes.%s.%s.%s = %v", name, m, p, q[p])
				}
			}
		}
		for _, f := range []string{"slo_attainment", "goodput_rps", "output_tokens_per_s"} {
			if v, ok := c[f].(float64); !ok || !(v > 0) {
				t.Errorf("classes.%s.%s = %v", name, f, c[f])
			}
		}
	}
	sat, _ := doc["saturation"].(map[string]any)
	if v, _ := sat["rps"].(float64); !(v > 0) {
		t.Errorf("saturation.rps = %v", sat["rps"])
	}
	if got := run["arrival_rps"].(float64); math.Abs(got-0.5*sat["rps"].(float64)) > 1e-9 {
		t.Errorf("arrival_rps %v is not 0.5 × saturation %v", got, sat["rps"])
	}
}

func TestTrace(t *testing.T) {
	rows, err := trace.ReadFile("testdata/small-trace.csv")
	if err != nil {
		t.Fatal(err)
	}
	w := testWorkload(t).WithTrace(rows)
	w.Spec.Warmup = workload.Warmup{}
	res, err := Evaluate(w, []string{"fifo"}, nil, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	run := res.Runs[0]
	if run.NumPrompts != len(rows) || run.Completed != len(rows) {
		t.Fatalf("%d requests, %d completed; the trace has %d", run.NumPrompts, run.Completed, len(rows))
	}
	var in, out int
	for _, r := range rows {
		in += r.PromptTokens
		out += r.OutputTokens
	}
	if run.TotalInputTokens != in || run.TotalOutputTokens != out {
		t.Errorf("tokens in %d out %d, trace has %d and %d", run.TotalInputTokens, run.TotalOutputTokens, in, out)
	}
	if want := naturalRate(w) / res.Saturation.RPS; math.Abs(run.Load-want) > 1e-9 {
		t.Errorf("load %v, want the trace's own rate over saturation %v", run.Load, want)
	}
	// Scaling a trace compresses its time.
	res2, err := Evaluate(w, []string{"fifo"}, []float64{2 * run.Load}, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	if got, want := res2.Runs[0].ArrivalRPS, 2*run.ArrivalRPS; math.Abs(got-want) > 1e-6*want {
		t.Errorf("load ×2: arrival %v req/s, want %v", got, want)
	}
}

func TestSaturation(t *testing.T) {
	w := testWorkload(t)
	small, err := Saturation(w, Options{MaxInflight: 4, SaturationRequests: 200})
	if err != nil {
		t.Fatal(err)
	}
	large, err := Saturation(w, Options{MaxInflight: 32, SaturationRequests: 200})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("saturation: pool 4 %.2f req/s, pool 32 %.2f req/s", small, large)
	if !(small > 0) || large < 2*small {
		t.Errorf("a pool of 32 should sustain well over twice a pool of 4: %.2f vs %.2f req/s", large, small)
	}
}

func TestBadOptions(t *testing.T) {
	w := testWorkload(t)
	cases := []struct {
		o     Options
		pols  []string
		loads []float64
		want  string
	}{
		{Options{MaxInflight: -1}, nil, nil, "max_inflight"},
		{Options{Predictor: "psychic"}, nil, nil, "predictor"},
		{Options{Profile: "no-such"}, nil, nil, "profile"},
		{Options{Preemption: preemptTarget(2)}, nil, nil, "preemption.target"},
		{Options{MetricsInterval: time.Microsecond}, nil, nil, "metrics_interval"},
		{Options{}, []string{"lottery"}, nil, "policies"},
		{Options{}, nil, []float64{-1}, "loads"},
		{Options{}, nil, []float64{math.NaN()}, "loads"},
		{Options{SaturationRequests: 5}, nil, nil, "saturation_requests"},
		{Options{MaxPrefillTokens: -1}, nil, nil, "max_prefill_tokens"},
		{Options{ReserveUrgent: 64}, nil, nil, "reserve_urgent"},
	}
	for _, c := range cases {
		_, err := Evaluate(w, c.pols, c.loads, c.o)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v %v %v: error %v, want one naming %s", c.o, c.pols, c.loads, err, c.want)
		}
	}
}

func TestText(t *testing.T) {
	w := testWorkload(t)
	res, err := Evaluate(w, []string{"fifo", "preemptive"}, []float64{0.3, 1}, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := WriteText(&buf, res, false); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{"saturation:", "== fifo at load 0.3", "== preemptive at load 1", "interactive p99 TTFT ms", "attainment"} {
		if !strings.Contains(out, want) {
			t.Errorf("text output lacks %q:\n%s", want, out)
		}
	}
}

// BenchmarkEvaluate is the cost of one simulated request (scheduler machine,
// engine model, statistics) at saturation under the preemptive policy; the
// one-hour Azure conversation trace has 19,366 requests per policy.
func BenchmarkEvaluate(b *testing.B) {
	w := testWorkload(b)
	o := testOptions()
	o.Duration = 5 * time.Minute
	var n int
	for b.Loop() {
		res, err := Evaluate(w, []string{"preemptive"}, []float64{1}, o)
		if err != nil {
			b.Fatal(err)
		}
		n += res.Runs[0].Sim.Requests
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/request")
}

// BenchmarkSaturationStandard is what llmesh demo pays to measure the
// standard workload's saturation rate with the demo's pool.
func BenchmarkSaturationStandard(b *testing.B) {
	w, err := workloads.LoadStandard()
	if err != nil {
		b.Fatal(err)
	}
	var rps float64
	for b.Loop() {
		if rps, err = Saturation(w, Options{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(rps, "req/s")
}

// collect draws every item of w's source.
func collect(w *workload.Workload) ([]workload.Item, error) {
	var items []workload.Item
	src := w.Source()
	for {
		it, ok := src.Next()
		if !ok {
			break
		}
		if len(items) >= maxItems {
			return nil, fmt.Errorf("simulate: more than %d requests in one run; shorten the duration", maxItems)
		}
		items = append(items, it)
	}
	if len(items) == 0 {
		return nil, errors.New("simulate: the workload yields no requests")
	}
	return items, nil
}
