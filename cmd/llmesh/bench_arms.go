package main

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/llmesh/llmesh/bench/provenance"
	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/scheduler/policy"
)

// A/B arms across builds. An arm of `bench simulate --a/--b` (virtual time)
// and of `bench ab --a/--b` (real time) may be another llmesh binary:
//
//	exec:PATH[,mesh=FILE]
//
// PATH is the binary; with mesh=FILE the arm uses that mesh config's first
// pool (its capacity and scheduler settings, the policy included). In
// virtual time an arm may also be a policy name, run by this binary.

// armSpec is a parsed arm, before any file is looked at.
type armSpec struct {
	// Exe is the binary of an exec: arm; "" for a policy arm.
	Exe string
	// Mesh is the mesh file of an exec: arm; "" for none.
	Mesh string
	// Policy is the policy of a policy arm.
	Policy string
}

// parseArmSpec reads "exec:PATH[,mesh=FILE]" or a policy name. It does no
// IO: validateArm checks the files.
func parseArmSpec(spec string) (armSpec, error) {
	rest, ok := strings.CutPrefix(spec, "exec:")
	if !ok {
		if spec == "" || strings.ContainsAny(spec, ",:= \t\n") {
			return armSpec{}, fmt.Errorf("%q: want exec:PATH[,mesh=FILE] or a policy name", spec)
		}
		return armSpec{Policy: spec}, nil
	}
	parts := strings.Split(rest, ",")
	a := armSpec{Exe: parts[0]}
	if a.Exe == "" {
		return armSpec{}, fmt.Errorf("%q: exec: needs the binary's path (exec:PATH[,mesh=FILE])", spec)
	}
	for _, p := range parts[1:] {
		k, v, ok := strings.Cut(p, "=")
		switch {
		case !ok:
			return armSpec{}, fmt.Errorf("%q: option %q: want KEY=VALUE (known: mesh)", spec, p)
		case k != "mesh":
			return armSpec{}, fmt.Errorf("%q: unknown option %q (known: mesh)", spec, k)
		case v == "":
			return armSpec{}, fmt.Errorf("%q: mesh: empty file name", spec)
		case a.Mesh != "":
			return armSpec{}, fmt.Errorf("%q: mesh given twice", spec)
		}
		a.Mesh = v
	}
	return a, nil
}

// benchArm is a validated arm.
type benchArm struct {
	armSpec
	// Spec is the flag's value as given.
	Spec string
	// MeshRaw is the mesh file as read (placeholders unresolved) and
	// MeshConfig its compiled form with placeholder addresses.
	MeshRaw    []byte
	MeshConfig *config.Config
	// Build is the binary's provenance.
	Build provenance.Build
}

// validateArm parses spec and checks, before anything runs, that an exec:
// arm's binary is an executable file and its mesh parses and has a pool, and
// that a policy arm names a registered policy. Every problem names the flag.
func validateArm(flagName, spec string) (*benchArm, error) {
	pfx := "--" + flagName + ": "
	if flagName == "" {
		pfx = ""
	}
	as, err := parseArmSpec(spec)
	if err != nil {
		return nil, fmt.Errorf("%s%w", pfx, err)
	}
	a := &benchArm{armSpec: as, Spec: spec}
	if as.Exe == "" {
		if !slices.Contains(policy.Names(), as.Policy) {
			return nil, fmt.Errorf("%s%q is neither exec:PATH[,mesh=FILE] nor a policy (known: %s)", pfx, spec, strings.Join(policy.Names(), ", "))
		}
		a.Build = provenance.Self()
		return a, nil
	}
	var errs []error
	st, err := os.Stat(as.Exe)
	switch {
	case err != nil:
		errs = append(errs, fmt.Errorf("%sexec: %w", pfx, err))
	case !st.Mode().IsRegular():
		errs = append(errs, fmt.Errorf("%sexec: %s is not a regular file", pfx, as.Exe))
	case st.Mode().Perm()&0o111 == 0:
		errs = append(errs, fmt.Errorf("%sexec: %s is not executable (mode %v)", pfx, as.Exe, st.Mode().Perm()))
	default:
		if a.Build, err = provenance.Of(as.Exe); err != nil {
			errs = append(errs, fmt.Errorf("%sexec: %w", pfx, err))
		}
	}
	if as.Mesh != "" {
		if a.MeshRaw, err = os.ReadFile(as.Mesh); err != nil {
			errs = append(errs, fmt.Errorf("%smesh: %w", pfx, err))
		} else if a.MeshConfig, err = config.Load(resolveMesh(a.MeshRaw, "127.0.0.1:1", "127.0.0.1:2")); err != nil {
			errs = append(errs, fmt.Errorf("%smesh %s: %w", pfx, as.Mesh, err))
		} else if len(a.MeshConfig.Pools) == 0 {
			errs = append(errs, fmt.Errorf("%smesh %s: no pools", pfx, as.Mesh))
		}
	}
	return a, errors.Join(errs...)
}

// policyName is the arm's policy: a policy arm's name, the mesh's first
// pool's policy, or fallback (the --policies of a bench simulate).
func (a *benchArm) policyName(fallback string) string {
	switch {
	case a.Policy != "":
		return a.Policy
	case a.MeshConfig != nil:
		return a.MeshConfig.Pools[0].Scheduler.Policy
	}
	return fallback
}

// simulateFlags are the bench simulate flags that give the arm its mesh's
// first pool: capacity, admission bounds, preemption guards and how often
// the engine's load is read (0: static capacity, as a pool without metrics
// has). Nil without a mesh.
func (a *benchArm) simulateFlags() []string {
	if a.MeshConfig == nil {
		return nil
	}
	p := a.MeshConfig.Pools[0]
	s := p.Scheduler
	f := []string{
		"--max-inflight=" + strconv.Itoa(p.MaxInflight),
		"--max-prefill-tokens=" + strconv.Itoa(s.MaxPrefillTokens),
		"--reserve-urgent=" + strconv.Itoa(s.ReserveUrgent),
		"--static-bounds=" + strconv.FormatBool(s.StaticBounds),
	}
	switch {
	case s.OverloadRelease < 0:
		f = append(f, "--overload-release=0")
	case s.OverloadRelease > 0:
		f = append(f, "--overload-release="+fmtFloat(s.OverloadRelease))
	}
	if s.Preemption.MinRunTime > 0 {
		f = append(f, "--min-run-time="+s.Preemption.MinRunTime.String())
	}
	if s.Preemption.MaxPerRequest > 0 {
		f = append(f, "--max-per-request="+strconv.Itoa(s.Preemption.MaxPerRequest))
	}
	if s.Preemption.Target > 0 {
		f = append(f, "--preempt-target="+fmtFloat(s.Preemption.Target))
	}
	interval := "0s"
	if p.Metrics != nil {
		interval = p.Metrics.Interval.String()
	}
	return append(f, "--metrics-interval="+interval)
}

func fmtFloat(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// exe is the binary that runs the arm: its own, or this one.
func (a *benchArm) exe() (string, error) {
	if a.Exe != "" {
		return a.Exe, nil
	}
	return os.Executable()
}
