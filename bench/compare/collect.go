package compare

import (
	"errors"
	"fmt"
	"sort"

	"github.com/llmesh/llmesh/bench/result"
)

// metricDef is one per-class metric a comparison reads from a run report.
type metricDef struct {
	name        string
	lowerBetter bool
	get         func(*result.ClassReport) float64
}

var classMetrics = []metricDef{
	{"ttft_p99_ms", true, func(c *result.ClassReport) float64 { return c.TTFTMs.P99 }},
	{"tpot_p99_ms", true, func(c *result.ClassReport) float64 { return c.TPOTMs.P99 }},
	{"slo_attainment", false, func(c *result.ClassReport) float64 { return c.SLOAttainment }},
	{"goodput_rps", false, func(c *result.ClassReport) float64 { return c.GoodputRPS }},
}

// MetricNames lists the per-class metrics FromReports reads.
func MetricNames() []string {
	out := make([]string, len(classMetrics))
	for i, d := range classMetrics {
		out[i] = d.name
	}
	return out
}

// FromReports pairs run reports unit by unit (a[i] and b[i] ran the same seed
// or repeat) and returns every class's metrics. primary maps a class to its
// declared primary metric; a class or metric it names that the reports lack
// is an error, as is an invalid or missing report, a class absent from one
// unit, or a different number of units per arm.
func FromReports(a, b []*result.Report, primary map[string]string) ([]Metric, error) {
	var errs []error
	if len(a) != len(b) {
		errs = append(errs, fmt.Errorf("arm A has %d units, arm B %d; runs must be paired", len(a), len(b)))
	}
	if len(a) == 0 {
		errs = append(errs, errors.New("no units: nothing ran"))
	}
	for arm, rs := range map[string][]*result.Report{"A": a, "B": b} {
		for i, r := range rs {
			switch {
			case r == nil:
				errs = append(errs, fmt.Errorf("arm %s unit %d: no report", arm, i))
			case !r.Valid:
				errs = append(errs, fmt.Errorf("arm %s unit %d: report is not valid", arm, i))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	var classes []string
	for c := range a[0].Classes {
		classes = append(classes, c)
	}
	sort.Strings(classes)
	for c, m := range primary {
		if _, ok := a[0].Classes[c]; !ok {
			errs = append(errs, fmt.Errorf("primary[%s]: no class %q in the reports", c, c))
		}
		if !known(m) {
			errs = append(errs, fmt.Errorf("primary[%s]: metric %q is not one of %v", c, m, MetricNames()))
		}
	}
	var out []Metric
	for _, c := range classes {
		for _, d := range classMetrics {
			m := Metric{Name: c + "." + d.name, LowerBetter: d.lowerBetter, Primary: primary[c] == d.name}
			for i := range a {
				ca, cb := a[i].Classes[c], b[i].Classes[c]
				if ca == nil || cb == nil {
					errs = append(errs, fmt.Errorf("unit %d: class %q missing on one arm", i, c))
					break
				}
				m.A = append(m.A, d.get(ca))
				m.B = append(m.B, d.get(cb))
			}
			out = append(out, m)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

func known(name string) bool {
	for _, d := range classMetrics {
		if d.name == name {
			return true
		}
	}
	return false
}
