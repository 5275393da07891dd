package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/llmesh/llmesh/bench/ab"
	"github.com/llmesh/llmesh/bench/compare"
	"github.com/llmesh/llmesh/bench/harness"
	"github.com/llmesh/llmesh/bench/progress"
	"github.com/llmesh/llmesh/bench/provenance"
	"github.com/llmesh/llmesh/bench/report"
	"github.com/llmesh/llmesh/bench/sweep"
	"github.com/llmesh/llmesh/bench/workload"
	"github.com/llmesh/llmesh/cmd/llmesh/internal/flag"
)

var (
	_ = addBenchCommand(command{name: "ab", summary: "A/B two targets (A B A B …) with bootstrap CIs and a verdict", run: runBenchAB})
	_ = addBenchCommand(command{name: "sweep", summary: "sweep rates to find each class's SLO knee and max goodput", run: runBenchSweep})
)

// abTargetResolvers turn "--a SCHEME:ARG" into an ab.Target; a bare URL or
// host:port is a fixed endpoint. A mode registers itself from its own file
// with one line (bench_embedded.go registers "embedded"):
//
//	var _ = addABTargetResolver("embedded", resolveEmbedded)
//
// A resolver gets ARG, the arm's --a-name/--b-name label (may be empty), the
// workload (nil when it failed to load, so that every problem is reported at
// once) and stderr for the arm's logs.
var abTargetResolvers = map[string]abTargetResolver{}

type abTargetResolver func(arg, label string, w *workload.Workload, stderr io.Writer) (ab.Target, error)

// addABTargetResolver registers a resolver for scheme; duplicates panic.
func addABTargetResolver(scheme string, f abTargetResolver) bool {
	if _, dup := abTargetResolvers[scheme]; dup {
		panic("llmesh: duplicate bench ab target scheme " + scheme)
	}
	abTargetResolvers[scheme] = f
	return true
}

func resolveABTarget(flagName, spec, label string, w *workload.Workload, stderr io.Writer) (ab.Target, error) {
	if spec == "" {
		return nil, fmt.Errorf("--%s: required", flagName)
	}
	if scheme, arg, ok := strings.Cut(spec, ":"); ok {
		if f := abTargetResolvers[scheme]; f != nil {
			t, err := f(arg, label, w, stderr)
			if err != nil {
				return nil, fmt.Errorf("--%s: %w", flagName, err)
			}
			return t, nil
		}
	}
	if label == "" {
		label = spec
	}
	return ab.URL{Label: label, Endpoint: spec}, nil
}

func runBenchAB(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("llmesh bench ab", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		wf                 workloadFlags
		a, b, aName, bName string
		jsonOut, mdOut     string
		htmlOut, format    string
		jsonlOut           string
		repeats, resamples int
		retries            int
		quiet, sloGate     bool
		cf                 compareFlags
	)
	wf.register(fs)
	fs.Var(&cf.gates, "fail-on", "exit 3 when `CLASS.METRIC>+N%` (or <-N%) is breached significantly in the paired judgement over repeats; repeatable")
	fs.Var(&cf.primaries, "primary", "declare `CLASS=METRIC` the class's primary metric of the paired judgement; repeatable")
	fs.Float64Var(&cf.alpha, "alpha", 0.05, "significance level of the paired judgement")
	fs.StringVar(&a, "a", "", "baseline target: URL, host:port, embedded:MESH-FILE to start a simulated engine and the gateway with that mesh config for every run, or exec:PATH,mesh=FILE to start that llmesh build's sim and gateway for every run (required)")
	fs.StringVar(&b, "b", "", "candidate target, same forms as --a (required)")
	fs.StringVar(&aName, "a-name", "", "label of A (for example the policy name)")
	fs.StringVar(&bName, "b-name", "", "label of B")
	fs.IntVar(&repeats, "repeats", 3, "number of A-B pairs; pair i uses seed+i on both arms")
	fs.IntVar(&resamples, "resamples", 1000, "bootstrap resamples")
	fs.IntVar(&retries, "retries", 1, "run a pair with an invalid run again, up to `N` times, before keeping it (the report lists every retry)")
	fs.StringVar(&jsonOut, "json", "", "write the comparison (with every run's report) as JSON to `FILE` (- for stdout)")
	fs.StringVar(&mdOut, "markdown", "", "write the comparison as Markdown to `FILE`")
	fs.StringVar(&htmlOut, "html", "", "write the comparison and every run's report as one self-contained HTML page to `FILE`")
	fs.StringVar(&jsonlOut, "jsonl", "", "write every run's per-request records to `FILE`, each with its run (A/1, B/1, …; bench report --records --run picks one)")
	fs.StringVar(&format, "format", "table", "stdout format: table, json, markdown, html")
	fs.BoolVar(&sloGate, "slo-gate", false, "exit 3 when a run of B misses a class's attainment target")
	fs.BoolVar(&quiet, "quiet", false, "no live progress")
	if err := fs.Parse(args); err != nil {
		return withExitCode(harness.ExitUsage, err)
	}
	w, err := wf.load(fs)
	errs := []error{err}
	ta, err := resolveABTarget("a", a, aName, w, stderr)
	errs = append(errs, err)
	tb, err := resolveABTarget("b", b, bName, w, stderr)
	errs = append(errs, err)
	if repeats <= 0 || repeats > 1000 {
		errs = append(errs, fmt.Errorf("--repeats: %d must be in [1, 1000]", repeats))
	}
	if retries < 0 || retries > 10 {
		errs = append(errs, fmt.Errorf("--retries: %d must be in [0, 10]", retries))
	}
	gates, flagged, ferrs := cf.parse()
	errs = append(errs, ferrs...)
	var primary map[string]string
	primaryFrom := primaryFromNone
	if w != nil {
		errs = append(errs, checkPrimaries(flagged, w)...)
		primary, primaryFrom = choosePrimary(flagged, w.Spec.Primary(), workloadPrimaryFrom(wf.file))
	}
	if resamples < 100 || resamples > 100000 {
		errs = append(errs, fmt.Errorf("--resamples: %d must be in [100, 100000]", resamples))
	}
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected arguments %q", fs.Args()))
	}
	if !slices.Contains(report.Formats, format) {
		errs = append(errs, fmt.Errorf("--format: %q must be one of %s", format, strings.Join(report.Formats, ", ")))
	}
	if err := errors.Join(errs...); err != nil {
		return withExitCode(harness.ExitUsage, err)
	}
	o := ab.Options{Workload: w, A: ta, B: tb, Repeats: repeats, Resamples: resamples, Retries: retries, Log: stderr,
		Primary: primary, Alpha: cf.alpha}
	if !quiet && progress.IsTerminal(stdout) {
		o.Progress = stderr
	}
	if jsonlOut != "" {
		jf, err := os.Create(jsonlOut)
		if err != nil {
			return err
		}
		defer jf.Close()
		o.JSONL = jf
	}
	prov, err := abProvenance(&wf, w, a, b)
	if err != nil {
		return err
	}
	res, runErr := ab.Compare(ctx, o)
	if res == nil {
		return runErr
	}
	for _, r := range res.Runs {
		if r.Arm == "A" {
			prov.Seeds = append(prov.Seeds, r.Seed)
		}
	}
	res.Provenance = prov
	res.PrimaryFrom = primaryFrom
	if res.Paired != nil {
		if res.Gates, err = compare.Check(res.Paired, gates); err != nil {
			return withExitCode(harness.ExitUsage, err)
		}
	}
	renderers := map[string]func(io.Writer, *ab.Result) error{"table": ab.Table, "json": ab.WriteJSON, "markdown": ab.Markdown, "html": ab.HTML}
	var outErrs []error
	if jsonOut != "-" && mdOut != "-" && htmlOut != "-" {
		outErrs = append(outErrs, renderers[format](stdout, res))
	}
	for _, f := range []struct{ path, format string }{{jsonOut, "json"}, {mdOut, "markdown"}, {htmlOut, "html"}} {
		if f.path != "" {
			outErrs = append(outErrs, writeFile(f.path, stdout, func(w io.Writer) error { return renderers[f.format](w, res) }))
		}
	}
	if err := errors.Join(runErr, errors.Join(outErrs...)); err != nil {
		return err
	}
	if err := abExit(res, sloGate); err != nil {
		return err
	}
	var breached []string
	for _, g := range res.Gates {
		if g.Breached {
			breached = append(breached, g.Gate)
		}
	}
	if len(breached) > 0 {
		return withExitCode(harness.ExitSLO, fmt.Errorf("gate breached: %s", strings.Join(breached, ", ")))
	}
	if len(gates) > 0 && res.Status == compare.Inconclusive {
		return withExitCode(harness.ExitInvalid, errors.New("comparison inconclusive: the gates cannot judge"))
	}
	return nil
}

// checkPrimaries names every --primary whose class is not in the workload
// or whose metric is not one bench compare judges.
func checkPrimaries(primary map[string]string, w *workload.Workload) []error {
	var errs []error
	for c, m := range primary {
		if !slices.ContainsFunc(w.Classes, func(k workload.Class) bool { return k.Name == c }) {
			var names []string
			for _, k := range w.Classes {
				names = append(names, k.Name)
			}
			errs = append(errs, fmt.Errorf("--primary %s=%s: no class %q in the workload (classes: %s)", c, m, c, strings.Join(names, ", ")))
		}
		if !slices.Contains(compare.MetricNames(), m) {
			errs = append(errs, fmt.Errorf("--primary %s=%s: metric %q is not one of %s", c, m, m, strings.Join(compare.MetricNames(), ", ")))
		}
	}
	return errs
}

// abProvenance records the build of each arm this command starts (an exec:
// arm's binary, this build for embedded:; a URL's is unknown), the mesh,
// workload and trace files, and the host before the first run.
func abProvenance(wf *workloadFlags, w *workload.Workload, specs ...string) (*provenance.Provenance, error) {
	p, err := wf.provenance(w)
	if err != nil {
		return nil, err
	}
	p.Seeds = nil
	for i, spec := range specs {
		key := []string{"A", "B"}[i]
		scheme, arg, _ := strings.Cut(spec, ":")
		switch scheme {
		case "exec":
			arm, err := validateArm("", spec)
			if err != nil {
				return nil, err
			}
			p.Builds[key] = arm.Build
			if err := p.AddFile(key+" mesh "+arm.Mesh, arm.Mesh); err != nil {
				return nil, err
			}
		case "embedded":
			p.Builds[key] = p.Builds["self"]
			if err := p.AddFile(key+" mesh "+arg, arg); err != nil {
				return nil, err
			}
		}
	}
	return p, nil
}

// abExit is the exit status of a finished A/B: 4 when it is inconclusive
// (a run was invalid, so no verdict is given), else with --slo-gate 3 when
// a run of the candidate missed a class's attainment target.
func abExit(res *ab.Result, sloGate bool) error {
	if !res.Valid {
		return withExitCode(exitInvalid, errors.New(res.Verdict))
	}
	if !sloGate {
		return nil
	}
	for _, r := range res.Runs {
		if r.Arm == "B" {
			if err := harness.Gate(r.Report); err != nil {
				return gateExit(fmt.Errorf("B (%s) run %d: %w", res.B, r.Repeat+1, err))
			}
		}
	}
	return nil
}

func runBenchSweep(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("llmesh bench sweep", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		wf                     workloadFlags
		target, rates, jsonOut string
		jsonlOut, htmlOut      string
		mdOut, format          string
		quiet, sloGate         bool
	)
	wf.register(fs)
	fs.StringVar(&target, "target", "", "endpoint (required)")
	fs.StringVar(&rates, "rates", "", "comma-separated offered loads: req/s (open loop), clients (closed loop) or speed-ups (trace) (required)")
	fs.StringVar(&jsonOut, "json", "", "write the sweep (with every run's report) as JSON to `FILE` (- for stdout)")
	fs.StringVar(&jsonlOut, "jsonl", "", "write every run's per-request records to `FILE`, each with its run (rate=R; bench report --records --run picks one)")
	fs.StringVar(&htmlOut, "html", "", "write the sweep as one self-contained HTML page with charts to `FILE`")
	fs.StringVar(&mdOut, "markdown", "", "write the sweep as Markdown to `FILE`")
	fs.StringVar(&format, "format", "table", "stdout format: table, json, markdown, html")
	fs.BoolVar(&sloGate, "slo-gate", false, "exit 3 when no valid rate had every class at its attainment target (4 when no run was valid)")
	fs.BoolVar(&quiet, "quiet", false, "no live progress")
	if err := fs.Parse(args); err != nil {
		return withExitCode(harness.ExitUsage, err)
	}
	var errs []error
	if target == "" {
		errs = append(errs, errors.New("--target: required"))
	}
	var rs []float64
	if rates == "" {
		errs = append(errs, errors.New("--rates: required"))
	}
	for i, f := range strings.Split(rates, ",") {
		if rates == "" {
			break
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || !(v > 0) {
			errs = append(errs, fmt.Errorf("--rates[%d]: %q is not a positive number", i, f))
			continue
		}
		rs = append(rs, v)
	}
	if !slices.Contains(sweep.Formats, format) {
		errs = append(errs, fmt.Errorf("--format: %q must be one of %s", format, strings.Join(sweep.Formats, ", ")))
	}
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected arguments %q", fs.Args()))
	}
	w, err := wf.load(fs)
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return withExitCode(harness.ExitUsage, err)
	}
	o := sweep.Options{Workload: w, Target: target, Rates: rs, Log: stderr}
	if !quiet && progress.IsTerminal(stdout) {
		o.Progress = stderr
	}
	if jsonlOut != "" {
		jf, err := os.Create(jsonlOut)
		if err != nil {
			return err
		}
		defer jf.Close()
		o.JSONL = jf
	}
	res, runErr := sweep.Sweep(ctx, o)
	if res == nil {
		return runErr
	}
	var outErrs []error
	if jsonOut != "-" && mdOut != "-" && htmlOut != "-" {
		outErrs = append(outErrs, sweep.Render(stdout, res, format))
	}
	for _, f := range []struct{ path, format string }{{jsonOut, "json"}, {mdOut, "markdown"}, {htmlOut, "html"}} {
		if f.path != "" {
			outErrs = append(outErrs, writeFile(f.path, stdout, func(w io.Writer) error { return sweep.Render(w, res, f.format) }))
		}
	}
	if err := errors.Join(runErr, errors.Join(outErrs...)); err != nil {
		return err
	}
	if !sloGate {
		return nil
	}
	switch err := sweep.Gate(res); {
	case errors.Is(err, sweep.ErrNoValidRun):
		return withExitCode(harness.ExitInvalid, err)
	case err != nil:
		return withExitCode(harness.ExitSLO, err)
	}
	return nil
}
