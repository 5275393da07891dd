package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/llmesh/llmesh/bench/compare"
	"github.com/llmesh/llmesh/bench/harness"
	"github.com/llmesh/llmesh/bench/provenance"
	"github.com/llmesh/llmesh/bench/result"
	"github.com/llmesh/llmesh/bench/workload"
	"github.com/llmesh/llmesh/cmd/llmesh/internal/flag"
)

var _ = addBenchCommand(command{name: "compare", summary: "paired A/B verdict over saved results: A1.json[,A2.json…] B1.json[,B2.json…], one file per seed or repeat, paired by position", run: runBenchCompare})

// stringList is a repeatable flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

// compareOutput is what `bench compare --json` writes.
type compareOutput struct {
	Verdict compare.Status   `json:"verdict"`
	Alpha   float64          `json:"alpha"`
	Units   int              `json:"units"`
	Policy  string           `json:"policy,omitempty"`
	Load    float64          `json:"load,omitempty"`
	Metrics []compare.Judged `json:"metrics"`
	// Primary is each class's primary metric as judged; PrimaryFrom says
	// where it came from: --primary, "workload FILE", inputs or none
	// (bench_primary.go).
	Primary     map[string]string    `json:"primary"`
	PrimaryFrom string               `json:"primary_from"`
	Gates       []compare.GateResult `json:"gates"`
	Inputs      map[string][]string  `json:"inputs"` // arm → "FILE sha256:HEX"
	// Provenance: each arm's build (from its inputs' own provenance, or the
	// binary an A/B ran), input hashes, seeds, and this host.
	Provenance *provenance.Provenance `json:"provenance,omitempty"`
	// Arms, RateRPS and RateFrom describe a bench simulate A/B: each arm as
	// given, the arrival rate both ran at (0: the workload's or the
	// trace's), and where it came from.
	Arms     map[string]string `json:"arms,omitempty"`
	RateRPS  float64           `json:"rate_rps,omitempty"`
	RateFrom string            `json:"rate_from,omitempty"`
}

// compareFlags are the judgement flags of bench compare, shared by the
// A/B modes that end in the same comparison (bench simulate --a/--b).
type compareFlags struct {
	gates, primaries stringList
	jsonOut          string
	markdown         string
	alpha            float64
}

// register adds every flag but --json, which each command owns.
func (c *compareFlags) register(fs *flag.FlagSet) {
	fs.Var(&c.gates, "fail-on", "exit 3 when `CLASS.METRIC>+N%` (or <-N%) is breached significantly; repeatable")
	fs.Var(&c.primaries, "primary", "declare `CLASS=METRIC` the class's primary metric; repeatable")
	fs.StringVar(&c.markdown, "markdown", "", "write a pull-request summary to `FILE` (- for stdout)")
	fs.Float64Var(&c.alpha, "alpha", 0.05, "significance level")
}

// parse checks the gates and primaries; every problem is returned.
// primary is nil when no --primary was given (the declared one applies).
func (c *compareFlags) parse() (gates []compare.Gate, primary map[string]string, errs []error) {
	for _, g := range c.gates {
		p, err := compare.ParseGate(g)
		if err != nil {
			errs = append(errs, err)
		}
		gates = append(gates, p)
	}
	primary, perrs := parsePrimaryFlags(c.primaries)
	errs = append(errs, perrs...)
	if !(c.alpha > 0 && c.alpha < 1) {
		errs = append(errs, fmt.Errorf("--alpha: %v must be in (0, 1)", c.alpha))
	}
	return gates, primary, errs
}

func runBenchCompare(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("llmesh bench compare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		cf     compareFlags
		policy string
		load   float64
		wfile  string
	)
	cf.register(fs)
	fs.StringVar(&wfile, "workload", "", "take the primary metrics from the `primary:` field of workload `FILE` (else from the inputs, which record their workload's; --primary overrides both)")
	fs.StringVar(&cf.jsonOut, "json", "", "write the comparison (top-level verdict) to `FILE` (- for stdout)")
	fs.StringVar(&policy, "policy", "", "with bench simulate results: the `POLICY` whose runs to compare")
	fs.Float64Var(&load, "load", 0, "with bench simulate results: the `LOAD` factor whose runs to compare")
	// Flags may follow the file lists.
	var files []string
	for rest := args; ; rest = fs.Args()[1:] {
		if err := fs.Parse(rest); err != nil {
			return withExitCode(harness.ExitUsage, err)
		}
		if fs.NArg() == 0 {
			break
		}
		files = append(files, fs.Arg(0))
	}
	loadSet := false
	fs.Visit(func(f *flag.Flag) { loadSet = loadSet || f.Name == "load" })
	// Every input is checked before anything is written.
	var errs []error
	if len(files) != 2 {
		errs = append(errs, fmt.Errorf("want two arguments (arm A files, arm B files), got %d", len(files)))
	}
	gates, flagged, ferrs := cf.parse()
	errs = append(errs, ferrs...)
	var declared map[string]string
	declaredFrom := primaryFromInputs
	if wfile != "" {
		w, err := workload.LoadFile(wfile)
		if err != nil {
			errs = append(errs, fmt.Errorf("--workload: %w", err))
		} else {
			declared, declaredFrom = w.Spec.Primary(), workloadPrimaryFrom(wfile)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return withExitCode(harness.ExitUsage, err)
	}
	// recorded[i] is the primary input i's file records, with its name.
	type recordedPrimary struct {
		file    string
		primary map[string]string
	}
	var recorded []recordedPrimary
	out := compareOutput{Alpha: cf.alpha, Policy: policy, Load: load, Inputs: map[string][]string{}, Provenance: provenance.New()}
	arms := map[string][]*result.Report{}
	// seeds[arm][i] is unit i's seed when it came from a bench simulate
	// --seeds file (-1 otherwise): such units must pair seed by seed.
	seeds := map[string][]int64{}
	for i, arm := range []string{"A", "B"} {
		if i >= len(files) {
			break
		}
		for _, f := range strings.Split(files[i], ",") {
			in, err := loadCompareReports(f, policy, load, loadSet)
			if err != nil {
				errs = append(errs, fmt.Errorf("arm %s: %w", arm, err))
				continue
			}
			arms[arm] = append(arms[arm], in.reports...)
			for j := range in.reports {
				s := int64(-1)
				if in.seeds != nil {
					s = in.seeds[j]
				}
				seeds[arm] = append(seeds[arm], s)
			}
			out.Inputs[arm] = append(out.Inputs[arm], f+" sha256:"+in.sum)
			if in.primary != nil {
				recorded = append(recorded, recordedPrimary{arm + " " + f, in.primary})
			}
			out.Provenance.Files[arm+" "+f] = in.sum
			if in.prov != nil {
				if b, ok := in.prov.Builds["self"]; ok {
					if _, seen := out.Provenance.Builds[arm]; !seen {
						out.Provenance.Builds[arm] = b
					}
				}
			}
		}
	}
	for i := 0; i < min(len(seeds["A"]), len(seeds["B"])); i++ {
		if a, b := seeds["A"][i], seeds["B"][i]; a >= 0 && b >= 0 && a != b {
			errs = append(errs, fmt.Errorf("unit %d: arm A ran seed %d, arm B seed %d; runs must be paired", i, a, b))
		}
		if s := seeds["A"][i]; s >= 0 {
			out.Provenance.Seeds = append(out.Provenance.Seeds, s)
		}
	}
	if wfile == "" && flagged == nil {
		// The inputs' recorded primaries must agree to be used.
		for _, r := range recorded {
			if !maps.Equal(r.primary, recorded[0].primary) {
				errs = append(errs, fmt.Errorf("inputs declare different primary metrics (%s: %s; %s: %s): pass --primary or --workload",
					recorded[0].file, fmtPrimary(recorded[0].primary), r.file, fmtPrimary(r.primary)))
				break
			}
		}
		if len(recorded) > 0 {
			declared = recorded[0].primary
		}
	}
	if err := errors.Join(errs...); err != nil {
		return withExitCode(harness.ExitUsage, err)
	}
	out.Primary, out.PrimaryFrom = choosePrimary(flagged, declared, declaredFrom)
	return judgeAndReport(stdout, arms["A"], arms["B"], out, &cf, gates)
}

// judgeAndReport judges paired units, prints the summary (unless --json or
// --markdown go to stdout), writes --json and --markdown atomically, and
// returns exit 3 for a breached gate, 4 for gates that cannot judge.
// The primaries are out.Primary.
func judgeAndReport(stdout io.Writer, a, b []*result.Report, out compareOutput, cf *compareFlags, gates []compare.Gate) error {
	ms, err := compare.FromReports(a, b, out.Primary)
	if err != nil {
		return withExitCode(harness.ExitUsage, err)
	}
	res, err := compare.Judge(ms, cf.alpha)
	if err != nil {
		return withExitCode(harness.ExitUsage, err)
	}
	gr, err := compare.Check(res, gates)
	if err != nil {
		return withExitCode(harness.ExitUsage, err)
	}
	out.Verdict, out.Metrics, out.Gates, out.Units = res.Verdict, res.Metrics, gr, len(a)
	summary := func(w io.Writer) error {
		if err := compare.WriteMarkdown(w, res, gr); err != nil {
			return err
		}
		if _, err := io.WriteString(w, "\n"+primaryText(out.Primary, out.PrimaryFrom)); err != nil {
			return err
		}
		if out.Provenance != nil {
			return out.Provenance.WriteMarkdown(w)
		}
		return nil
	}
	if cf.markdown != "-" && cf.jsonOut != "-" {
		if err := summary(stdout); err != nil {
			return err
		}
	}
	if err := writeAtomic(cf.jsonOut, stdout, func(w io.Writer) error {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}); err != nil {
		return err
	}
	if err := writeAtomic(cf.markdown, stdout, summary); err != nil {
		return err
	}
	var breached []string
	for _, g := range gr {
		if g.Breached {
			breached = append(breached, g.Gate)
		}
	}
	switch {
	case len(breached) > 0:
		sort.Strings(breached)
		return withExitCode(harness.ExitSLO, fmt.Errorf("gate breached: %s", strings.Join(breached, ", ")))
	case len(gates) > 0 && res.Verdict == compare.Inconclusive:
		return withExitCode(harness.ExitInvalid, errors.New("comparison inconclusive: the gates cannot judge"))
	}
	return nil
}

// compareInput is one input file's units.
type compareInput struct {
	reports []*result.Report
	// seeds lists each unit's seed for a bench simulate --seeds file; nil
	// for the other kinds.
	seeds []int64
	// sum is the file's sha256; prov its recorded provenance, nil when it
	// has none (a file from an older build).
	sum  string
	prov *provenance.Provenance
	// primary is the primary metrics the file records (a bench simulate
	// result records its workload's); nil when it records none.
	primary map[string]string
}

// loadCompareReports reads one file's units: a bench run report (one
// unit), the run of a bench simulate result at policy and load (one unit),
// or of every seed's result in a `bench simulate --seeds N` file (N units,
// in seed order; seeds lists them, nil for the other kinds).
func loadCompareReports(path, policy string, load float64, loadSet bool) (*compareInput, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	h := sha256.Sum256(data)
	in := &compareInput{sum: hex.EncodeToString(h[:])}
	var probe struct {
		Provenance *provenance.Provenance `json:"provenance"`
		Primary    map[string]string      `json:"primary"`
		Runs       []json.RawMessage      `json:"runs"`
		Seeds      []int64                `json:"seeds"`
		Results    []struct {
			Runs []json.RawMessage `json:"runs"`
		} `json:"results"`
	}
	if err := json.Unmarshal(data, &probe); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	in.prov, in.primary = probe.Provenance, probe.Primary
	switch {
	case probe.Results != nil:
		if len(probe.Seeds) != len(probe.Results) || len(probe.Results) == 0 {
			return nil, fmt.Errorf("%s: %d seeds and %d results, want as many of each and at least one", path, len(probe.Seeds), len(probe.Results))
		}
		var errs []error
		for i, r := range probe.Results {
			rep, err := pickSimulateRun(r.Runs, policy, load, loadSet)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: results[%d] (seed %d): %w", path, i, probe.Seeds[i], err))
			}
			in.reports = append(in.reports, rep)
		}
		in.seeds = probe.Seeds
		return in, errors.Join(errs...)
	case probe.Runs != nil:
		rep, err := pickSimulateRun(probe.Runs, policy, load, loadSet)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		in.reports = []*result.Report{rep}
		return in, nil
	}
	var rep result.Report
	if err := json.Unmarshal(data, &rep); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if rep.Classes == nil {
		return nil, fmt.Errorf("%s: neither a bench run report (no classes) nor a bench simulate result (no runs)", path)
	}
	in.reports = []*result.Report{&rep}
	return in, nil
}

// pickSimulateRun picks the run at policy and load of one bench simulate
// result. --load picks by load factor; without it the policy must name one
// run (loads from --rate differ per seed, as each seed measures its own
// saturation).
func pickSimulateRun(runs []json.RawMessage, policy string, load float64, loadSet bool) (*result.Report, error) {
	var seen []string
	var found []*result.Report
	for i, raw := range runs {
		rep := new(result.Report)
		if err := json.Unmarshal(raw, rep); err != nil {
			return nil, fmt.Errorf("runs[%d]: %w", i, err)
		}
		seen = append(seen, fmt.Sprintf("%s@%g", rep.Policy, rep.Load))
		if (policy == "" || rep.Policy == policy) && (!loadSet || rep.Load == load) {
			found = append(found, rep)
		}
	}
	if len(found) != 1 {
		return nil, fmt.Errorf("%d runs match --policy %q --load %g, want one (has %s)", len(found), policy, load, strings.Join(seen, ", "))
	}
	return found[0], nil
}

// writeAtomic writes to a temporary file beside path and renames it, so a
// failed render never replaces a previous result; "" writes nothing, "-"
// writes to stdout.
func writeAtomic(path string, stdout io.Writer, render func(io.Writer) error) error {
	switch path {
	case "":
		return nil
	case "-":
		return render(stdout)
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	if err := render(f); err != nil {
		f.Close()
		os.Remove(f.Name())
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		os.Remove(f.Name())
		return err
	}
	return os.Rename(f.Name(), path)
}
