package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/llmesh/llmesh/bench/compare"
	"github.com/llmesh/llmesh/bench/provenance"
	"github.com/llmesh/llmesh/bench/result"
	"github.com/llmesh/llmesh/bench/workload"
	"github.com/llmesh/llmesh/cmd/llmesh/internal/flag"
)

// `bench simulate --a ARM --b ARM --seeds N`: each arm's build runs its own
// `bench simulate --json` as a subprocess over the same seeds, the same
// workload or trace and the same arrival rate in req/s, and the two files
// are judged by the code of `bench compare`. With --loads L the rate is
// fixed once, as L × arm A's saturation rate at the first seed, and passed
// to both arms as --rate: a build that changes the engine or pool model
// must not get a different offered load.

// simABFlags are the flags only the A/B mode reads; every other flag the
// command line sets is passed on to both arms' bench simulate as given.
var simABFlags = map[string]bool{
	"a": true, "b": true, "fail-on": true, "primary": true, "markdown": true, "alpha": true,
	"json": true, "seeds": true, "seed": true, "loads": true, "rate": true, "policies": true,
	"cpuprofile": true, "brief": true,
}

// simAB is a validated virtual-time A/B across builds.
type simAB struct {
	arms     [2]*benchArm
	policies [2]string
	forward  []string // flags for both arms
	seeds    int
	seed     int64   // first seed of both arms
	load     float64 // 0: no --loads
	rate     float64 // 0: the workload's own (or the trace's)
	trace    bool
	cf       *compareFlags
	gates    []compare.Gate
	primary  map[string]string // --primary; nil: the workload's
	wfile    string            // --workload ("": the standard one)
	files    map[string]string // provenance key → path
}

// prepareSimulateAB checks the arms and the flags of an A/B before anything
// runs; every problem is returned.
func prepareSimulateAB(fs *flag.FlagSet, a, b, policies string, loads []float64, rate float64, cf *compareFlags) (*simAB, []error) {
	s := &simAB{cf: cf, rate: rate, files: map[string]string{}}
	var errs []error
	for i, spec := range []string{a, b} {
		name := []string{"a", "b"}[i]
		if spec == "" {
			errs = append(errs, fmt.Errorf("--%s: required with --%s", name, []string{"b", "a"}[i]))
			continue
		}
		arm, err := validateArm(name, spec)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		s.arms[i] = arm
		if arm.Mesh != "" {
			s.files[strings.ToUpper(name)+" mesh "+arm.Mesh] = arm.Mesh
		}
	}
	var pols []string
	if policies != "" {
		pols = strings.Split(policies, ",")
	}
	for i, arm := range s.arms {
		if arm == nil {
			continue
		}
		switch {
		case arm.Policy != "" && len(pols) > 0:
			errs = append(errs, fmt.Errorf("--policies: not with a policy arm (--%s %s)", []string{"a", "b"}[i], arm.Spec))
		case arm.Policy == "" && arm.MeshConfig == nil && len(pols) != 1:
			errs = append(errs, fmt.Errorf("--%s %s: an exec: arm without mesh=FILE runs the one policy --policies names (got %q)", []string{"a", "b"}[i], arm.Spec, policies))
		}
		fallback := ""
		if len(pols) == 1 {
			fallback = pols[0]
		}
		s.policies[i] = arm.policyName(fallback)
	}
	if len(loads) > 1 {
		errs = append(errs, fmt.Errorf("--loads: %d load factors; an A/B runs one (the comparison pairs one run per seed)", len(loads)))
	} else if len(loads) == 1 {
		s.load = loads[0]
	}
	gates, primary, ferrs := cf.parse()
	s.gates, s.primary = gates, primary
	errs = append(errs, ferrs...)
	fs.Visit(func(f *flag.Flag) {
		switch {
		case f.Name == "seeds":
			s.seeds, _ = strconv.Atoi(f.Value.String())
		case f.Name == "seed":
			s.seed, _ = strconv.ParseInt(f.Value.String(), 10, 64)
		case f.Name == "trace":
			s.trace = true
			s.files["trace "+f.Value.String()] = f.Value.String()
		case f.Name == "workload":
			s.files["workload "+f.Value.String()] = f.Value.String()
			s.wfile = f.Value.String()
		}
		if !simABFlags[f.Name] {
			s.forward = append(s.forward, "--"+f.Name+"="+f.Value.String())
		}
	})
	if s.seeds == 0 {
		s.seeds = 1
	}
	if s.load > 0 && s.trace {
		errs = append(errs, errors.New("--loads: not with --trace in an A/B (the trace sets the rate)"))
	}
	return s, errs
}

// run runs both arms, judges them and writes the comparison. w is the
// parsed workload (its seed is the default first seed).
func (s *simAB) run(ctx context.Context, stdout, stderr io.Writer, w *workload.Workload) error {
	if s.seed == 0 {
		s.seed = w.Spec.Seed
	}
	if err := errors.Join(checkPrimaries(s.primary, w)...); err != nil {
		return withExitCode(2, err)
	}
	prov := provenance.New()
	prov.Builds["A"], prov.Builds["B"] = s.arms[0].Build, s.arms[1].Build
	for k, path := range s.files {
		if err := prov.AddFile(k, path); err != nil {
			return err
		}
	}
	dir, err := os.MkdirTemp("", "llmesh-simab-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	out := compareOutput{Alpha: s.cf.alpha, Inputs: map[string][]string{}, Provenance: prov,
		Arms: map[string]string{"A": s.arms[0].Spec, "B": s.arms[1].Spec}}
	out.Primary, out.PrimaryFrom = choosePrimary(s.primary, w.Spec.Primary(), workloadPrimaryFrom(s.wfile))
	if s.load > 0 {
		sat, err := s.saturation(ctx, dir)
		if err != nil {
			return err
		}
		s.rate = s.load * sat
		out.RateFrom = fmt.Sprintf("load %g × arm A's saturation %.4g req/s (seed %d)", s.load, sat, s.seed)
	}
	out.RateRPS = s.rate
	fmt.Fprintf(stderr, "simulate A/B: A %s (%s), B %s (%s), %d seeds from %d, %s\n", s.arms[0].Spec, s.policies[0], s.arms[1].Spec, s.policies[1], s.seeds, s.seed, s.rateText())
	reps := [2][]*result.Report{}
	seeds := [2][]int64{}
	for i, arm := range s.arms {
		key := []string{"A", "B"}[i]
		path := filepath.Join(dir, key+".json")
		seed := s.seed
		args := []string{"--json", path, "--seeds", strconv.Itoa(s.seeds), "--seed", strconv.FormatInt(seed, 10)}
		if s.rate > 0 {
			args = append(args, "--rate", fmtFloat(s.rate))
		}
		if err := s.simulate(ctx, i, args); err != nil {
			return err
		}
		in, err := loadCompareReports(path, s.policies[i], 0, false)
		if err != nil {
			return fmt.Errorf("arm %s (%s): %w", key, arm.Spec, err)
		}
		if in.seeds == nil {
			// One seed: the plain bench simulate JSON.
			in.seeds = []int64{seed}
		}
		reps[i], seeds[i] = in.reports, in.seeds
		out.Inputs[key] = []string{arm.Spec + " sha256:" + in.sum}
	}
	for i := range min(len(seeds[0]), len(seeds[1])) {
		if seeds[0][i] != seeds[1][i] {
			return fmt.Errorf("unit %d: arm A ran seed %d, arm B seed %d; runs must be paired", i, seeds[0][i], seeds[1][i])
		}
	}
	prov.Seeds = seeds[0]
	return judgeAndReport(stdout, reps[0], reps[1], out, s.cf, s.gates)
}

func (s *simAB) rateText() string {
	switch {
	case s.rate > 0:
		return fmt.Sprintf("%.4g req/s on both arms", s.rate)
	case s.trace:
		return "the trace's arrivals on both arms"
	}
	return "the workload's rate on both arms"
}

// saturation is arm A's saturation rate at the first seed: one short run of
// its bench simulate at --loads, whose result records the rate load 1.0 is.
func (s *simAB) saturation(ctx context.Context, dir string) (float64, error) {
	path := filepath.Join(dir, "saturation.json")
	args := []string{"--json", path, "--seeds", "1", "--seed", strconv.FormatInt(s.seed, 10), "--loads", fmtFloat(s.load), "--duration", "1s"}
	if err := s.simulate(ctx, 0, args); err != nil {
		return 0, fmt.Errorf("saturation: %w", err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	var r struct {
		Saturation struct {
			RPS float64 `json:"rps"`
		} `json:"saturation"`
	}
	if err := json.Unmarshal(data, &r); err != nil || !(r.Saturation.RPS > 0) {
		return 0, fmt.Errorf("saturation: arm A (%s) recorded no saturation rate (%v)", s.arms[0].Spec, err)
	}
	return r.Saturation.RPS, nil
}

// simulate runs arm i's bench simulate with args, then the forwarded flags
// and the arm's mesh settings (which win over forwarded ones).
func (s *simAB) simulate(ctx context.Context, i int, args []string) error {
	arm := s.arms[i]
	exe, err := arm.exe()
	if err != nil {
		return err
	}
	full := append([]string{"bench", "simulate", "--policies", s.policies[i]}, args...)
	full = append(full, s.forward...)
	full = append(full, arm.simulateFlags()...)
	cmd := exec.CommandContext(ctx, exe, full...)
	var errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = io.Discard, &errOut
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("arm %s (%s): %s %s: %w\n%s", []string{"A", "B"}[i], arm.Spec, exe, strings.Join(full, " "), err, lastBytes(errOut.String(), 2000))
	}
	return nil
}

// lastBytes is the last n bytes of s.
func lastBytes(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}
