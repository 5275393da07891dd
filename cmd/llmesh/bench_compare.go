package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/llmesh/llmesh/bench/compare"
	"github.com/llmesh/llmesh/bench/harness"
	"github.com/llmesh/llmesh/bench/result"
)

var _ = addBenchCommand(command{name: "compare", summary: "paired A/B verdict over saved results: A1.json[,A2.json…] B1.json[,B2.json…], one file per seed or repeat, paired by position", run: runBenchCompare})

// stringList is a repeatable flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

// compareOutput is what `bench compare --json` writes.
type compareOutput struct {
	Verdict compare.Status       `json:"verdict"`
	Alpha   float64              `json:"alpha"`
	Units   int                  `json:"units"`
	Policy  string               `json:"policy,omitempty"`
	Load    float64              `json:"load,omitempty"`
	Metrics []compare.Judged     `json:"metrics"`
	Gates   []compare.GateResult `json:"gates"`
	Inputs  map[string][]string  `json:"inputs"` // arm → "FILE sha256:HEX"
}

func runBenchCompare(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("llmesh bench compare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		gates, primaries  stringList
		jsonOut, markdown string
		policy            string
		load, alpha       float64
	)
	fs.Var(&gates, "fail-on", "exit 3 when `CLASS.METRIC>+N%` (or <-N%) is breached significantly; repeatable")
	fs.Var(&primaries, "primary", "declare `CLASS=METRIC` the class's primary metric; repeatable")
	fs.StringVar(&jsonOut, "json", "", "write the comparison (top-level verdict) to `FILE` (- for stdout)")
	fs.StringVar(&markdown, "markdown", "", "write a pull-request summary to `FILE` (- for stdout)")
	fs.StringVar(&policy, "policy", "", "with bench simulate results: the `POLICY` whose runs to compare")
	fs.Float64Var(&load, "load", 0, "with bench simulate results: the `LOAD` factor whose runs to compare")
	fs.Float64Var(&alpha, "alpha", 0.05, "significance level")
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
	var parsed []compare.Gate
	for _, g := range gates {
		p, err := compare.ParseGate(g)
		if err != nil {
			errs = append(errs, err)
		}
		parsed = append(parsed, p)
	}
	primary := map[string]string{}
	for i, p := range primaries {
		c, m, ok := strings.Cut(p, "=")
		if !ok || c == "" || m == "" {
			errs = append(errs, fmt.Errorf("--primary[%d] %q: want CLASS=METRIC", i, p))
			continue
		}
		primary[c] = m
	}
	if err := errors.Join(errs...); err != nil {
		return withExitCode(harness.ExitUsage, err)
	}
	out := compareOutput{Alpha: alpha, Policy: policy, Load: load, Inputs: map[string][]string{}}
	arms := map[string][]*result.Report{}
	// seeds[arm][i] is unit i's seed when it came from a bench simulate
	// --seeds file (-1 otherwise): such units must pair seed by seed.
	seeds := map[string][]int64{}
	for i, arm := range []string{"A", "B"} {
		if i >= len(files) {
			break
		}
		for _, f := range strings.Split(files[i], ",") {
			reps, ss, sum, err := loadCompareReports(f, policy, load, loadSet)
			if err != nil {
				errs = append(errs, fmt.Errorf("arm %s: %w", arm, err))
				continue
			}
			arms[arm] = append(arms[arm], reps...)
			for j := range reps {
				s := int64(-1)
				if ss != nil {
					s = ss[j]
				}
				seeds[arm] = append(seeds[arm], s)
			}
			out.Inputs[arm] = append(out.Inputs[arm], f+" sha256:"+sum)
		}
	}
	for i := 0; i < min(len(seeds["A"]), len(seeds["B"])); i++ {
		if a, b := seeds["A"][i], seeds["B"][i]; a >= 0 && b >= 0 && a != b {
			errs = append(errs, fmt.Errorf("unit %d: arm A ran seed %d, arm B seed %d; runs must be paired", i, a, b))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return withExitCode(harness.ExitUsage, err)
	}
	ms, err := compare.FromReports(arms["A"], arms["B"], primary)
	if err != nil {
		return withExitCode(harness.ExitUsage, err)
	}
	res, err := compare.Judge(ms, alpha)
	if err != nil {
		return withExitCode(harness.ExitUsage, err)
	}
	gr, err := compare.Check(res, parsed)
	if err != nil {
		return withExitCode(harness.ExitUsage, err)
	}
	out.Verdict, out.Metrics, out.Gates, out.Units = res.Verdict, res.Metrics, gr, len(arms["A"])
	if markdown != "-" && jsonOut != "-" {
		if err := compare.WriteMarkdown(stdout, res, gr); err != nil {
			return err
		}
	}
	if err := writeAtomic(jsonOut, stdout, func(w io.Writer) error {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}); err != nil {
		return err
	}
	if err := writeAtomic(markdown, stdout, func(w io.Writer) error { return compare.WriteMarkdown(w, res, gr) }); err != nil {
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
	case len(parsed) > 0 && res.Verdict == compare.Inconclusive:
		return withExitCode(harness.ExitInvalid, errors.New("comparison inconclusive: the gates cannot judge"))
	}
	return nil
}

// loadCompareReports reads one file's units: a bench run report (one
// unit), the run of a bench simulate result at policy and load (one unit),
// or of every seed's result in a `bench simulate --seeds N` file (N units,
// in seed order; seeds lists them, nil for the other kinds).
func loadCompareReports(path, policy string, load float64, loadSet bool) (reps []*result.Report, seeds []int64, sum string, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, "", err
	}
	h := sha256.Sum256(data)
	sum = hex.EncodeToString(h[:])
	var probe struct {
		Runs    []json.RawMessage `json:"runs"`
		Seeds   []int64           `json:"seeds"`
		Results []struct {
			Runs []json.RawMessage `json:"runs"`
		} `json:"results"`
	}
	if err := json.Unmarshal(data, &probe); err != nil {
		return nil, nil, "", fmt.Errorf("%s: %w", path, err)
	}
	switch {
	case probe.Results != nil:
		if len(probe.Seeds) != len(probe.Results) || len(probe.Results) == 0 {
			return nil, nil, "", fmt.Errorf("%s: %d seeds and %d results, want as many of each and at least one", path, len(probe.Seeds), len(probe.Results))
		}
		var errs []error
		for i, r := range probe.Results {
			rep, err := pickSimulateRun(r.Runs, policy, load, loadSet)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: results[%d] (seed %d): %w", path, i, probe.Seeds[i], err))
			}
			reps = append(reps, rep)
		}
		return reps, probe.Seeds, sum, errors.Join(errs...)
	case probe.Runs != nil:
		rep, err := pickSimulateRun(probe.Runs, policy, load, loadSet)
		if err != nil {
			return nil, nil, "", fmt.Errorf("%s: %w", path, err)
		}
		return []*result.Report{rep}, nil, sum, nil
	}
	var rep result.Report
	if err := json.Unmarshal(data, &rep); err != nil {
		return nil, nil, "", fmt.Errorf("%s: %w", path, err)
	}
	if rep.Classes == nil {
		return nil, nil, "", fmt.Errorf("%s: neither a bench run report (no classes) nor a bench simulate result (no runs)", path)
	}
	return []*result.Report{&rep}, nil, sum, nil
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
