package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/llmesh/llmesh/bench/compare"
	"github.com/llmesh/llmesh/bench/harness"
	"github.com/llmesh/llmesh/bench/provenance"
	"github.com/llmesh/llmesh/bench/result"
	"github.com/llmesh/llmesh/bench/trace"
	"github.com/llmesh/llmesh/cmd/llmesh/internal/flag"
)

var _ = addBenchCommand(command{name: "calibrate", summary: "measure the virtual-time A/B's false-verdict rate (A/A) and its power on a planted effect", run: runBenchCalibrate})

// calibrateOutput is what `bench calibrate --json` writes.
type calibrateOutput struct {
	Workload string  `json:"workload"`
	Policy   string  `json:"policy"`
	RateRPS  float64 `json:"rate_rps"`
	RateFrom string  `json:"rate_from,omitempty"`
	Duration string  `json:"duration"`
	Primary  string  `json:"primary"`
	Alpha    float64 `json:"alpha"`
	// Pool is the number of seed pairs simulated; each comparison draws
	// SeedsPer of them without replacement.
	Pool       int                    `json:"pool"`
	SeedsPer   int                    `json:"seeds_per_comparison"`
	Offset     int64                  `json:"b_seed_offset"`
	AA         calibrationRate        `json:"aa"`
	Planted    *calibrationRate       `json:"planted,omitempty"`
	WallS      float64                `json:"wall_s"`
	Provenance *provenance.Provenance `json:"provenance"`
}

// calibrationRate counts the verdicts of repeated comparisons.
type calibrationRate struct {
	// Flags is arm B's extra bench simulate flags (the planted change).
	Flags       string `json:"flags,omitempty"`
	Comparisons int    `json:"comparisons"`
	Better      int    `json:"better"`
	Worse       int    `json:"worse"`
	// AnySignificant counts comparisons in which any metric, primary or
	// not (Holm-corrected), was called better or worse.
	AnySignificant int `json:"any_significant"`
	// Rate is the share of comparisons with a verdict: false verdicts
	// for the A/A, detections (verdict worse) for the planted change.
	Rate float64 `json:"rate"`
	// PoolChange is the primary metric's mean relative change from A to B
	// over the whole pool.
	PoolChange float64 `json:"pool_change"`
	Goal       string  `json:"goal"`
	Met        bool    `json:"met"`
}

func runBenchCalibrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("llmesh bench calibrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		file     = fs.String("workload", "", "workload YAML `FILE` (default: the standard one)")
		pol      = fs.String("policy", "preemptive", "policy both arms run (with --build exec:PATH,mesh=FILE: the mesh's)")
		build    = fs.String("build", "", "the build to calibrate, `exec:PATH[,mesh=FILE]` (as bench simulate --a takes it): the llmesh binary every run uses, with the mesh's first pool when given; default this build")
		load     = fs.Float64("load", 0.1, "arrival rate as a multiple of the saturation rate at the first seed (fixed once for every run)")
		rate     = fs.Float64("rate", 0, "arrival rate in req/s instead of --load")
		duration = fs.Duration("duration", 60*time.Second, "measured duration of each simulated run")
		seedsPer = fs.Int("seeds", 10, "seeds (paired units) per comparison")
		comps    = fs.Int("comparisons", 200, "A/A comparisons")
		planComp = fs.Int("planted-comparisons", 100, "comparisons with the planted change")
		pool     = fs.Int("pool", 100, "seed pairs simulated, at most 1000; each comparison draws --seeds of them (more: less shared between comparisons, slower)")
		offset   = fs.Int64("offset", 100000, "A/A: arm B runs seed s+OFFSET where arm A runs seed s, as an independent repeat would")
		seed     = fs.Int64("seed", 0, "first seed (default: the workload's)")
		planted  = fs.String("planted", "--hop=2ms", "arm B's extra bench simulate flags for the planted change (default: a 2 ms one-way hop between proxy, scheduler and engine, about +12% interactive P99 TTFT at load 0.1); empty: no planted run")
		primary  = fs.String("primary", "", "`CLASS=METRIC` whose verdict is counted (default: the workload's declared primary)")
		alpha    = fs.Float64("alpha", 0.05, "significance level")
		jsonOut  = fs.String("json", "", "write the rates as JSON to `FILE` (- for stdout)")
	)
	if err := fs.Parse(args); err != nil {
		return withExitCode(harness.ExitUsage, err)
	}
	var errs []error
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected arguments %q", fs.Args()))
	}
	if *seedsPer < 2 || *seedsPer > 1000 {
		errs = append(errs, fmt.Errorf("--seeds: %d must be in [2, 1000]", *seedsPer))
	}
	if *pool < *seedsPer || *pool > 1000 {
		// 1000: the most seeds one bench simulate --seeds runs.
		errs = append(errs, fmt.Errorf("--pool: %d must be in [--seeds, 1000]", *pool))
	}
	if *comps < 1 || *comps > 1_000_000 {
		errs = append(errs, fmt.Errorf("--comparisons: %d must be in [1, 1000000]", *comps))
	}
	if *planComp < 0 || *planComp > 1_000_000 {
		errs = append(errs, fmt.Errorf("--planted-comparisons: %d must be in [0, 1000000]", *planComp))
	}
	if *offset < int64(*pool) {
		errs = append(errs, fmt.Errorf("--offset: %d must be at least --pool (%d), so that no seed runs on both arms", *offset, *pool))
	}
	if *duration <= 0 {
		errs = append(errs, fmt.Errorf("--duration: %v must be positive", *duration))
	}
	if *rate < 0 || (*rate == 0 && !(*load > 0 && *load <= 10)) {
		errs = append(errs, fmt.Errorf("--load: %v must be in (0, 10] (or give --rate)", *load))
	}
	cl, m, ok := strings.Cut(*primary, "=")
	if *primary != "" && (!ok || cl == "" || m == "") {
		errs = append(errs, fmt.Errorf("--primary: %q: want CLASS=METRIC", *primary))
	}
	if !(*alpha > 0 && *alpha < 1) {
		errs = append(errs, fmt.Errorf("--alpha: %v must be in (0, 1)", *alpha))
	}
	arm, err := validateArm("policy", *pol)
	if *build != "" {
		if arm, err = validateArm("build", *build); err == nil && arm.Exe == "" {
			err = fmt.Errorf("--build: %q: want exec:PATH[,mesh=FILE]", *build)
		}
	}
	errs = append(errs, err)
	plantedFlags := strings.Fields(*planted)
	for _, f := range plantedFlags {
		if !strings.HasPrefix(f, "-") {
			errs = append(errs, fmt.Errorf("--planted: %q: want bench simulate flags, e.g. --hop=3ms", f))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return withExitCode(harness.ExitUsage, err)
	}
	w, err := simWorkload(*file, "", trace.Format(""))
	if err != nil {
		return withExitCode(harness.ExitUsage, err)
	}
	if *primary == "" {
		if cl, m, err = declaredPrimary(w.Spec.Primary(), *file); err != nil {
			return withExitCode(harness.ExitUsage, err)
		}
		*primary = cl + "=" + m
	}
	start := time.Now()
	*pol = arm.policyName(*pol)
	s := &simAB{arms: [2]*benchArm{arm, arm}, policies: [2]string{*pol, *pol}, seeds: *pool, seed: *seed, rate: *rate,
		forward: []string{"--duration=" + duration.String()}}
	if *file != "" {
		s.forward = append(s.forward, "--workload="+*file)
	}
	if s.seed == 0 {
		s.seed = w.Spec.Seed
	}
	prov := provenance.New()
	if err := prov.AddFile("workload "+*file, *file); err != nil {
		return err
	}
	// Both arms run the calibrated build; "self" only drives them.
	prov.Builds["A"], prov.Builds["B"] = arm.Build, arm.Build
	if err := prov.AddFile("mesh "+arm.Mesh, arm.Mesh); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "llmesh-calibrate-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	out := calibrateOutput{Workload: w.Spec.Name, Policy: *pol, Duration: duration.String(), Primary: *primary, Alpha: *alpha,
		Pool: *pool, SeedsPer: *seedsPer, Offset: *offset, Provenance: prov}
	if s.rate == 0 {
		s.load = *load
		sat, err := s.saturation(ctx, dir)
		if err != nil {
			return err
		}
		s.rate = s.load * sat
		out.RateFrom = fmt.Sprintf("load %g × saturation %.4g req/s (seed %d)", s.load, sat, s.seed)
	}
	out.RateRPS = s.rate
	fmt.Fprintf(stderr, "calibrate: %s, %s at %.4g req/s, %v runs, %d seed pairs per arm\n", w.Spec.Name, *pol, s.rate, *duration, *pool)
	pools := map[string][]*result.Report{}
	for _, r := range []struct {
		name  string
		seed  int64
		extra []string
	}{{"A", s.seed, nil}, {"B", s.seed + *offset, nil}, {"planted", s.seed, plantedFlags}} {
		if r.name == "planted" && (len(plantedFlags) == 0 || *planComp == 0) {
			continue
		}
		path := filepath.Join(dir, r.name+".json")
		args := append([]string{"--json", path, "--seeds", strconv.Itoa(*pool), "--seed", strconv.FormatInt(r.seed, 10), "--rate", fmtFloat(s.rate)}, r.extra...)
		if err := s.simulate(ctx, 0, args); err != nil {
			return fmt.Errorf("%s: %w", r.name, err)
		}
		in, err := loadCompareReports(path, *pol, 0, false)
		if err != nil {
			return fmt.Errorf("%s: %w", r.name, err)
		}
		pools[r.name] = in.reports
	}
	for i := range *pool {
		prov.Seeds = append(prov.Seeds, s.seed+int64(i))
	}
	prim := map[string]string{cl: m}
	rng := rand.New(rand.NewPCG(uint64(s.seed), 0x11e5))
	aa, err := calibrationRun(pools["A"], pools["B"], prim, *alpha, *seedsPer, *comps, rng)
	if err != nil {
		return err
	}
	aa.Rate = float64(aa.Better+aa.Worse) / float64(aa.Comparisons)
	aa.Goal, aa.Met = "≤ 5% with a verdict", aa.Rate <= 0.05
	out.AA = aa
	if b := pools["planted"]; b != nil {
		pl, err := calibrationRun(pools["A"], b, prim, *alpha, *seedsPer, *planComp, rng)
		if err != nil {
			return err
		}
		pl.Flags = strings.Join(plantedFlags, " ")
		pl.Rate = float64(pl.Worse) / float64(pl.Comparisons)
		pl.Goal, pl.Met = "≥ 95% called worse", pl.Rate >= 0.95
		out.Planted = &pl
	}
	out.WallS = time.Since(start).Seconds()
	if *jsonOut != "-" {
		writeCalibration(stdout, &out)
	}
	return writeAtomic(*jsonOut, stdout, func(w io.Writer) error { return encodeJSON(w, out) })
}

// calibrationRun judges n comparisons, each of k pairs drawn without
// replacement from the pools (pair i: a[i] and b[i]; disjoint within one
// pass through the pool), and counts verdicts.
// PoolChange is the primary's mean relative change over every pair.
func calibrationRun(a, b []*result.Report, primary map[string]string, alpha float64, k, n int, rng *rand.Rand) (calibrationRate, error) {
	r := calibrationRate{Comparisons: n}
	judge := func(idx []int) (*compare.Result, error) {
		sa, sb := make([]*result.Report, len(idx)), make([]*result.Report, len(idx))
		for j, i := range idx {
			sa[j], sb[j] = a[i], b[i]
		}
		ms, err := compare.FromReports(sa, sb, primary)
		if err != nil {
			return nil, err
		}
		return compare.Judge(ms, alpha)
	}
	all := make([]int, min(len(a), len(b)))
	for i := range all {
		all[i] = i
	}
	whole, err := judge(all)
	if err != nil {
		return r, err
	}
	for _, j := range whole.Metrics {
		if j.Primary {
			r.PoolChange = j.RelDelta
		}
	}
	// Each pass through the pool is one shuffle cut into disjoint draws of
	// k pairs: comparisons share pairs only across passes.
	perm, pos := rng.Perm(len(all)), 0
	for range n {
		if pos+k > len(perm) {
			perm, pos = rng.Perm(len(all)), 0
		}
		idx := perm[pos : pos+k]
		pos += k
		res, err := judge(idx)
		if err != nil {
			return r, err
		}
		switch res.Verdict {
		case compare.Better:
			r.Better++
		case compare.Worse:
			r.Worse++
		}
		for _, j := range res.Metrics {
			if j.Status == compare.Better || j.Status == compare.Worse {
				r.AnySignificant++
				break
			}
		}
	}
	return r, nil
}

func writeCalibration(w io.Writer, o *calibrateOutput) {
	fmt.Fprintf(w, "workload %s, policy %s, %.4g req/s", o.Workload, o.Policy, o.RateRPS)
	if o.RateFrom != "" {
		fmt.Fprintf(w, " (%s)", o.RateFrom)
	}
	fmt.Fprintf(w, ", %s per run; %d seed pairs, comparisons of %d drawn from them; verdict on %s at alpha %g\n", o.Duration, o.Pool, o.SeedsPer, o.Primary, o.Alpha)
	line := func(name string, r *calibrationRate, what string) {
		met := "met"
		if !r.Met {
			met = "NOT met"
		}
		fmt.Fprintf(w, "%s: %d comparisons: %d better, %d worse: %s %.1f%% (goal %s: %s); any metric significant in %.1f%%; pool change %+.2f%%\n",
			name, r.Comparisons, r.Better, r.Worse, what, 100*r.Rate, r.Goal, met, 100*float64(r.AnySignificant)/float64(r.Comparisons), 100*r.PoolChange)
	}
	line(fmt.Sprintf("A/A (B seed = A seed + %d)", o.Offset), &o.AA, "false verdicts")
	if o.Planted != nil {
		line("planted ("+o.Planted.Flags+" on B, same seeds)", o.Planted, "detected")
	}
	fmt.Fprintf(w, "wall time %.1f s\n", o.WallS)
}

func encodeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// declaredPrimary is the one primary a workload declares, which calibrate
// counts when --primary is not given; interactive's P99 TTFT when it
// declares none.
func declaredPrimary(declared map[string]string, file string) (class, metric string, err error) {
	if len(declared) == 0 {
		return "interactive", "ttft_p99_ms", nil
	}
	if len(declared) > 1 {
		return "", "", fmt.Errorf("--primary: %s declares %d primary metrics; calibrate counts one: give --primary CLASS=METRIC", workloadPrimaryFrom(file), len(declared))
	}
	for c, m := range declared {
		class, metric = c, m
	}
	return class, metric, nil
}
