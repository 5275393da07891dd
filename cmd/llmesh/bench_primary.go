package main

import (
	"fmt"
	"sort"
	"strings"
)

// Where the primary metrics of a paired judgement come from, in order of
// precedence: --primary, the workload's `primary:` field (bench ab, bench
// simulate --a/--b, bench compare --workload), the primary recorded in
// bench compare's input files (a bench simulate result records its
// workload's), else none (every metric decides the verdict).
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
