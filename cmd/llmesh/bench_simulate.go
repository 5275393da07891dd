package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/llmesh/llmesh/bench/provenance"
	"github.com/llmesh/llmesh/bench/simulate"
	"github.com/llmesh/llmesh/bench/trace"
	"github.com/llmesh/llmesh/bench/workload"
	"github.com/llmesh/llmesh/bench/workloads"
	"github.com/llmesh/llmesh/cmd/llmesh/internal/flag"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/sim"
)

var _ = addBenchCommand(command{name: "simulate", summary: "evaluate scheduling policies in virtual time (scheduler + engine model)", run: runBenchSimulate})

// runBenchSimulate is `llmesh bench simulate`.
func runBenchSimulate(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	fs := flag.NewFlagSet("llmesh bench simulate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		file      = fs.String("workload", "", "workload YAML `FILE` (default: the standard "+workloads.Standard+")")
		traceFile = fs.String("trace", "", "trace `FILE` (Azure CSV or Mooncake JSON lines): arrivals and lengths from it, classes by the workload's shares")
		traceFmt  = fs.String("trace-format", "", "trace format: azure or mooncake (default: detected from the file)")
		policies  = fs.String("policies", "", "comma-separated policies (default: all registered)")
		loads     = fs.String("loads", "", "comma-separated load factors, each × the measured saturation rate (default: the workload's own rate)")
		duration  = fs.Duration("duration", 0, "measured duration per run, replacing the workload's (not with --trace)")
		seed      = fs.Int64("seed", 0, "random seed (default: the workload's)")
		seeds     = fs.Int("seeds", 1, "run every policy and load over `N` seeds (--seed, --seed+1, …); --json then holds every seed's result, which bench compare reads as N paired units")
		jsonOut   = fs.String("json", "", "write the result as one JSON object to `FILE` (- for stdout, instead of the tables)")
		brief     = fs.Bool("brief", false, "print only the saturation point and the comparison table")
		inflight  = fs.Int("max-inflight", simulate.DefaultMaxInflight, "pool capacity (max_inflight)")
		prefill   = fs.Int("max-prefill-tokens", 0, "pool: most prompt tokens admitted but not yet prefilled, for every class but the most urgent (0: no bound)")
		reserve   = fs.Int("reserve-urgent", 0, "pool: slots only the most urgent class may take (0: none)")
		release   = fs.Float64("overload-release", scheduler.DefaultOverloadRelease, "pool: the derived bounds give way while a less urgent request has waited more than this many times its TTFT objective (0: never)")
		static    = fs.Bool("static-bounds", false, "pool: keep --max-prefill-tokens and --reserve-urgent as given (0: off) for preemptive policies too, instead of deriving the ones left at 0 from observed traffic")
		late      = fs.Bool("late-handoff", false, "admissions in reaction to a step's tokens reach the engine's step after next, as with a real engine loop (default: the next step, optimistic)")
		pastTO    = fs.Bool("run-past-timeout", false, "let every request run to its end and report one past the workload's timeout as a timeout after the fact (default: the client gives up at the timeout, as the harness's does)")
		interval  = fs.Duration("metrics-interval", simulate.DefaultMetricsInterval, "re-derive the pool limit from the engine's load this often (0: static capacity)")
		maxSeqs   = fs.Int("max-num-seqs", 256, "engine: most running sequences")
		maxBatch  = fs.Int("max-num-batched-tokens", 8192, "engine: most tokens per step")
		longPre   = fs.Int("long-prefill-token-threshold", 0, "engine: most prefill tokens of one sequence per step, as vLLM's --long-prefill-token-threshold (0: no cap)")
		engPolicy = fs.String("engine-policy", "fcfs", "engine: waiting-queue order, fcfs or priority (the request's class priority)")
		predictor = fs.String("predictor", simulate.PredictObserved, "prefill prediction for preemption: observed or timing")
		target    = fs.Float64("preempt-target", 1, "preemption target: share of the TTFT objective a predicted TTFT may reach, in (0, 1]")
		minRun    = fs.Duration("min-run-time", simulate.DefaultMinRunTime, "preemption guard: minimum run time of a victim")
		maxPer    = fs.Int("max-per-request", simulate.DefaultMaxPerRequest, "preemption guard: most preemptions of one request")
		engines   = fs.Int("engines", 1, "fleet: engine replicas behind the pool; --max-inflight, --max-prefill-tokens and --reserve-urgent are per engine")
		proxies   = fs.Int("proxies", 1, "fleet: hosts in front of the engines")
		scheds    = fs.String("schedulers", simulate.SchedulersShared, "fleet: "+simulate.SchedulersShared+" (one scheduler for every proxy) or "+simulate.SchedulersPerProxy+" (each proxy its own, with its share of every engine's limit)")
		routing   = fs.String("routing", simulate.RoutingEndpointAware, "fleet: "+simulate.RoutingEndpointAware+" (the lease's endpoint), "+simulate.RoutingPool+" (pool-level admission, least-request host choice by the proxy), "+simulate.RoutingPrefixAware+" (endpoint-aware, preferring the engine that was sent the prompt's prefix) or "+simulate.RoutingPrefixPrecise+" (the same, from what each engine's prefix cache holds, as its KV-cache events report)")
		prefixW   = fs.Float64("prefix-weight", simulate.DefaultPrefixWeight, "fleet, routing "+simulate.RoutingPrefixAware+": what a full prefix match is worth in the picker's load score (1: one engine's whole slot count)")
		hop       = fs.Duration("hop", 0, "fleet: one-way network delay between a proxy and the scheduler, and between a proxy and an engine")
		rate      = fs.Float64("rate", 0, "arrival rate in req/s, replacing the workload's (not with --loads or --trace)")
		records   = fs.String("records", "", "write every request's record to `FILE` as JSON lines (result.ReadRecords' format; Run names the policy and load), in item order per run")
		cpuProf   = fs.String("cpuprofile", "", "write a CPU profile of the evaluation to `FILE` (go tool pprof)")
		parallel  = fs.Int("parallel", 0, "most runs (policy and load pairs) executed at once (0: two per processor, fewer where the requests waiting in fleets far past saturation would exceed 512 MiB together); the reports do not depend on it")
		memProf   = fs.String("memprofile", "", "write a heap profile to `FILE` (go tool pprof) as of the largest live heap of the evaluation, sampled after garbage collections")
		armA      = fs.String("a", "", "A/B: baseline arm, exec:PATH[,mesh=FILE] (another llmesh build, with that mesh's pool and policy) or a policy name; both arms run every seed at the same rate and the comparison is judged as by bench compare")
		armB      = fs.String("b", "", "A/B: candidate arm, same forms as --a")
		profile   = fs.String("profile", "", "engine profile (default: the workload's; known: "+strings.Join(sim.Profiles(), ", ")+")")
	)
	var cf compareFlags
	cf.register(fs)
	if err := fs.Parse(args); err != nil {
		return withExitCode(2, err)
	}
	var errs []error
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected arguments: %q", fs.Args()))
	}
	ls, err := parseLoads(*loads)
	if err != nil {
		errs = append(errs, err)
	}
	if *maxPer < 1 {
		errs = append(errs, fmt.Errorf("--max-per-request: %d must be at least 1", *maxPer))
	}
	if *minRun < 0 {
		errs = append(errs, fmt.Errorf("--min-run-time: %v must not be negative", *minRun))
	}
	if !(*release == 0 || *release >= 1) {
		errs = append(errs, fmt.Errorf("--overload-release: %v must be 0 (never) or at least 1", *release))
	}
	if *duration < 0 {
		errs = append(errs, fmt.Errorf("--duration: %v must not be negative", *duration))
	}
	if *duration > 0 && *traceFile != "" {
		errs = append(errs, errors.New("--duration: a trace sets its own length"))
	}
	if _, err := trace.ParseFormat(*traceFmt); err != nil {
		errs = append(errs, fmt.Errorf("--trace-format: %w", err))
	}
	if *prefill < 0 {
		errs = append(errs, fmt.Errorf("--max-prefill-tokens: %d must not be negative", *prefill))
	}
	if *reserve < 0 || *reserve >= *inflight {
		errs = append(errs, fmt.Errorf("--reserve-urgent: %d must be in [0, --max-inflight)", *reserve))
	}
	if *longPre < 0 {
		errs = append(errs, fmt.Errorf("--long-prefill-token-threshold: %d must not be negative", *longPre))
	}
	if *interval < 0 {
		errs = append(errs, fmt.Errorf("--metrics-interval: %v must not be negative", *interval))
	}
	if *engines < 1 {
		errs = append(errs, fmt.Errorf("--engines: %d must be at least 1", *engines))
	}
	if *proxies < 1 {
		errs = append(errs, fmt.Errorf("--proxies: %d must be at least 1", *proxies))
	}
	if !slices.Contains(simulate.Routings(), *routing) {
		errs = append(errs, fmt.Errorf("--routing: %q must be one of %s", *routing, strings.Join(simulate.Routings(), ", ")))
	}
	if !(*prefixW > 0) || math.IsInf(*prefixW, 0) {
		errs = append(errs, fmt.Errorf("--prefix-weight: %v must be a finite number above 0", *prefixW))
	}
	if *scheds != simulate.SchedulersShared && *scheds != simulate.SchedulersPerProxy {
		errs = append(errs, fmt.Errorf("--schedulers: %q must be %s or %s", *scheds, simulate.SchedulersShared, simulate.SchedulersPerProxy))
	}
	if *hop < 0 {
		errs = append(errs, fmt.Errorf("--hop: %v must not be negative", *hop))
	}
	if *rate < 0 || *rate != *rate {
		errs = append(errs, fmt.Errorf("--rate: %v must be positive", *rate))
	}
	if *seeds < 1 || *seeds > 1000 {
		errs = append(errs, fmt.Errorf("--seeds: %d must be in [1, 1000]", *seeds))
	}
	if *rate > 0 && (*loads != "" || *traceFile != "") {
		errs = append(errs, errors.New("--rate: not with --loads or --trace (those set the rate)"))
	}
	ep, err := sim.ParsePolicy(*engPolicy)
	if err != nil {
		errs = append(errs, fmt.Errorf("--engine-policy: %w", err))
	}
	var ab *simAB
	if *armA != "" || *armB != "" {
		var abErrs []error
		ab, abErrs = prepareSimulateAB(fs, *armA, *armB, *policies, ls, *rate, &cf)
		errs = append(errs, abErrs...)
	} else {
		fs.Visit(func(f *flag.Flag) {
			if f.Name == "fail-on" || f.Name == "primary" || f.Name == "markdown" || f.Name == "alpha" {
				errs = append(errs, fmt.Errorf("--%s: only with --a and --b", f.Name))
			}
		})
	}
	if err := errors.Join(errs...); err != nil {
		return withExitCode(2, err)
	}
	w, err := simWorkload(*file, *traceFile, trace.Format(*traceFmt))
	if err != nil {
		return err
	}
	if ab != nil {
		cf.jsonOut = *jsonOut
		return ab.run(ctx, stdout, stderr, w)
	}
	if *rate > 0 {
		if w.Spec.Arrival.Rate <= 0 {
			return withExitCode(2, fmt.Errorf("--rate: the workload's arrival process %q has no rate", w.Spec.Arrival.Process))
		}
		w = w.ScaleRate(*rate / w.RequestRate())
	}
	o := simulate.Options{
		Engines: *engines, Proxies: *proxies, Routing: *routing, PrefixWeight: *prefixW, Schedulers: *scheds, Hop: *hop,
		Parallel: *parallel, Profile: *profile, MaxInflight: *inflight, Duration: *duration, Seed: *seed, Predictor: *predictor,
		Engine:          sim.Config{MaxNumSeqs: *maxSeqs, MaxNumBatchedTokens: *maxBatch, Policy: ep, LongPrefillTokenThreshold: *longPre},
		MetricsInterval: *interval, MaxPrefillTokens: *prefill, ReserveUrgent: *reserve, LateHandoff: *late, StaticBounds: *static,
		RunPastTimeout:  *pastTO,
		OverloadRelease: overloadRelease(*release),
		Preemption:      scheduler.PreemptionConfig{MinLowerInflight: 1, MinRunTime: *minRun, MaxPerRequest: *maxPer, Target: *target},
	}
	if *interval == 0 {
		o.MetricsInterval = -1
	}
	var names []string
	if *policies != "" {
		names = strings.Split(*policies, ",")
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		old := debug.SetMemoryLimit(simulate.SoftMemoryLimit)
		defer debug.SetMemoryLimit(old)
	}
	if *cpuProf != "" {
		pf, err := os.Create(*cpuProf)
		if err != nil {
			return err
		}
		defer pf.Close()
		if err := pprof.StartCPUProfile(pf); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if *memProf != "" {
		mf, err := os.Create(*memProf)
		if err != nil {
			return fmt.Errorf("--memprofile: %w", err)
		}
		stop := peakHeapProfile()
		defer func() {
			_, werr := mf.Write(stop())
			if cerr := mf.Close(); werr == nil {
				werr = cerr
			}
			if werr != nil && err == nil {
				err = fmt.Errorf("--memprofile: %w", werr)
			}
		}()
	}
	if *records != "" {
		if *seeds > 1 {
			return withExitCode(2, errors.New("--records: not with --seeds"))
		}
		rf, err := os.Create(*records)
		if err != nil {
			return fmt.Errorf("--records: %w", err)
		}
		bw := bufio.NewWriterSize(rf, 1<<20)
		o.Records = simulate.NewRecordWriter(bw)
		defer func() {
			ferr := bw.Flush()
			if cerr := rf.Close(); ferr == nil {
				ferr = cerr
			}
			if ferr != nil && err == nil {
				err = fmt.Errorf("--records: %w", ferr)
			}
		}()
	}
	prov := provenance.New()
	for k, path := range map[string]string{"workload " + *file: *file, "trace " + *traceFile: *traceFile} {
		if err := prov.AddFile(k, path); err != nil {
			return err
		}
	}
	if *seeds > 1 {
		return simulateSeeds(stdout, w, names, ls, o, *seeds, *jsonOut, *brief, prov)
	}
	res, err := simulate.Evaluate(w, names, ls, o)
	if err != nil {
		return withExitCode(2, err)
	}
	primary := w.Spec.Primary()
	if *jsonOut != "" {
		prov.Seeds = []int64{cmp.Or(o.Seed, w.Spec.Seed)}
		if err := writeFile(*jsonOut, stdout, func(w io.Writer) error { return writeSimulateJSON(w, res, prov, primary) }); err != nil || *jsonOut == "-" {
			return err
		}
	}
	return simulate.WriteText(stdout, res, *brief)
}

// peakHeapProfile watches the live heap (as of the latest garbage
// collection) every heapPoll and keeps the heap profile of the largest
// one seen: a profile written at the end would show what the run keeps
// after its work is done, not what made its peak. stop ends the watch and
// returns that profile (the one at stop when none was larger).
func peakHeapProfile() (stop func() []byte) {
	const heapPoll = 100 * time.Millisecond
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	live := func() uint64 {
		metrics.Read(sample)
		if sample[0].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return sample[0].Value.Uint64()
	}
	var (
		best    []byte
		bestAt  uint64
		done    = make(chan struct{})
		stopped = make(chan struct{})
	)
	take := func() {
		var buf bytes.Buffer
		if err := pprof.Lookup("heap").WriteTo(&buf, 0); err == nil {
			best = buf.Bytes()
		}
	}
	go func() {
		defer close(stopped)
		t := time.NewTicker(heapPoll)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				// Take a profile only when the heap grew by an eighth:
				// each one costs a pass over every sampled allocation.
				if n := live(); n > bestAt+bestAt/8 {
					bestAt = n
					take()
				}
			}
		}
	}()
	return func() []byte {
		close(done)
		<-stopped
		if n := live(); n > bestAt || best == nil {
			take()
		}
		return best
	}
}

// seededResult is the JSON of `bench simulate --seeds N`: one whole result
// per seed, in seed order. bench compare reads each as one unit, so two
// builds' files pair seed by seed.
type seededResult struct {
	Seeds []int64 `json:"seeds"`
	// Results are what --json writes for one seed (simulate.WriteJSON).
	Results []json.RawMessage `json:"results"`
	// Provenance: this build, the input files, the seeds and the host.
	Provenance *provenance.Provenance `json:"provenance,omitempty"`
	// Primary is the workload's declared primary metrics, which bench
	// compare uses when not told otherwise.
	Primary map[string]string `json:"primary,omitempty"`
}

// writeSimulateJSON writes one result as simulate.WriteJSON does, with
// its provenance and the workload's declared primary metrics added.
func writeSimulateJSON(w io.Writer, r *simulate.Result, p *provenance.Provenance, primary map[string]string) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(struct {
		*simulate.Result
		Comparison []simulate.Comparison  `json:"comparison"`
		Provenance *provenance.Provenance `json:"provenance"`
		Primary    map[string]string      `json:"primary,omitempty"`
	}{r, r.Compare(), p, primary})
}

// simulateSeeds evaluates the same policies and loads with n consecutive
// seeds from o.Seed (or the workload's).
func simulateSeeds(stdout io.Writer, w *workload.Workload, names []string, loads []float64, o simulate.Options, n int, jsonOut string, brief bool, prov *provenance.Provenance) error {
	base := o.Seed
	if base == 0 {
		base = w.Spec.Seed
	}
	var out seededResult
	var results []*simulate.Result
	for i := range n {
		o.Seed = base + int64(i)
		res, err := simulate.Evaluate(w, names, loads, o)
		if err != nil {
			return withExitCode(2, fmt.Errorf("seed %d: %w", o.Seed, err))
		}
		var buf bytes.Buffer
		if err := simulate.WriteJSON(&buf, res); err != nil {
			return err
		}
		out.Seeds = append(out.Seeds, o.Seed)
		out.Results = append(out.Results, buf.Bytes())
		results = append(results, res)
	}
	prov.Seeds = out.Seeds
	out.Provenance = prov
	out.Primary = w.Spec.Primary()
	if jsonOut != "" {
		if err := writeFile(jsonOut, stdout, func(w io.Writer) error {
			enc := json.NewEncoder(w)
			enc.SetIndent("", "  ")
			return enc.Encode(out)
		}); err != nil || jsonOut == "-" {
			return err
		}
	}
	for i, res := range results {
		fmt.Fprintf(stdout, "== seed %d ==\n", out.Seeds[i])
		if err := simulate.WriteText(stdout, res, brief); err != nil {
			return err
		}
	}
	return nil
}

func parseLoads(s string) ([]float64, error) {
	if s == "" {
		return nil, nil
	}
	var out []float64
	var errs []error
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || !(v > 0) {
			errs = append(errs, fmt.Errorf("--loads: %q is not a positive number", f))
			continue
		}
		out = append(out, v)
	}
	return out, errors.Join(errs...)
}

// simWorkload loads the workload (or the embedded standard one) and, with
// a trace, replays the trace with the workload's classes.
func simWorkload(file, traceFile string, format trace.Format) (*workload.Workload, error) {
	var w *workload.Workload
	if file == "" {
		var err error
		if w, err = workloads.LoadStandard(); err != nil {
			return nil, err
		}
	} else {
		var err error
		if w, err = workload.LoadFile(file); err != nil {
			return nil, withExitCode(exitUsage, err)
		}
	}
	if traceFile != "" {
		return w.WithTraceFile(traceFile, format)
	}
	return w, nil
}

// overloadRelease maps --overload-release to the pool's factor: 0 means
// never (negative there); the default is passed as given.
func overloadRelease(f float64) float64 {
	if f == 0 {
		return -1
	}
	return f
}
