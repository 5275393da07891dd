package main

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/llmesh/llmesh/bench/workload"
)

// Where the primary metrics of a paired judgement come from, in order of
// precedence: --primary, the workload's `primary:` field (bench ab, bench
// simulate --a/--b, bench compare --workload), the primary recorded in
// bench compare's input files (bench run and bench simulate results record
// theirs: runPrimary), else none (every metric decides the verdict).
const (
	primaryFromFlag   = "--primary"
	primaryFromInputs = "inputs"
	primaryFromNone   = "none"
)

// choosePrimary picks flagged (the --primary flags; nil when none was
// given) over declared, which came from declaredFrom.
func choosePrimary(flagged, declared map[string]string, declaredFrom string) (map[string]string, string) {
	switch {
	case flagged != nil:
		return flagged, primaryFromFlag
	case len(declared) > 0:
		return declared, declaredFrom
	}
	return nil, primaryFromNone
}

// parsePrimaryFlags reads repeated --primary CLASS=METRIC flags into
// class → metric; nil when none was given. Every problem is returned.
func parsePrimaryFlags(flags []string) (map[string]string, []error) {
	var primary map[string]string
	var errs []error
	for i, p := range flags {
		cl, m, err := workload.ParsePrimary(p)
		if err != nil {
			errs = append(errs, fmt.Errorf("--primary[%d] %w", i, err))
			continue
		}
		if primary == nil {
			primary = map[string]string{}
		}
		if prev, dup := primary[cl]; dup && prev != m {
			errs = append(errs, fmt.Errorf("--primary[%d] %q: class %q already has primary %s; one per class", i, p, cl, prev))
			continue
		}
		primary[cl] = m
	}
	return primary, errs
}

// runPrimary is what a bench run report records as its primary metrics:
// the --primary flags (flagged, nil when none; each must name one of w's
// classes) over the workload's declaration, file being the workload file
// ("" for a run from the quick flags, which declares none). from is ""
// when neither declares any, so the report records nothing.
func runPrimary(flagged map[string]string, w *workload.Workload, file string) (primary map[string]string, from string, err error) {
	var classes []string
	for _, c := range w.Classes {
		classes = append(classes, c.Name)
	}
	var errs []error
	for _, c := range slices.Sorted(maps.Keys(flagged)) {
		if !slices.Contains(classes, c) {
			errs = append(errs, fmt.Errorf("--primary %s=%s: no class %q in the workload (classes: %s)", c, flagged[c], c, strings.Join(classes, ", ")))
		}
	}
	if len(errs) > 0 {
		return nil, "", errors.Join(errs...)
	}
	primary, from = choosePrimary(flagged, w.Spec.Primary(), workloadPrimaryFrom(file))
	if from == primaryFromNone {
		return nil, "", nil
	}
	return primary, from, nil
}

// workloadPrimaryFrom names a workload file as a primary's source; "" is
// the built-in standard workload.
func workloadPrimaryFrom(file string) string {
	if file == "" {
		return "workload mixed-priority (built in)"
	}
	return "workload " + file
}

// primaryText is one line naming the primaries and their source.
func primaryText(primary map[string]string, from string) string {
	if len(primary) == 0 {
		return "Primary metrics: none declared; every metric decides the verdict (Holm-corrected).\n"
	}
	return fmt.Sprintf("Primary metrics: %s (from %s).\n", fmtPrimary(primary), from)
}

// fmtPrimary lists primaries as CLASS.METRIC, sorted; "none" when empty.
func fmtPrimary(primary map[string]string) string {
	if len(primary) == 0 {
		return "none"
	}
	var ps []string
	for c, m := range primary {
		ps = append(ps, c+"."+m)
	}
	sort.Strings(ps)
	return strings.Join(ps, ", ")
}
