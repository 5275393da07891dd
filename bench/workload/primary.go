package workload

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/llmesh/llmesh/bench/compare"
	"github.com/llmesh/llmesh/internal/editdist"
)

// Primaries is the workload's `primary:` field: each class's primary metric
// of a paired A/B judgement (bench ab, bench simulate --a/--b, bench
// compare), in the form of the --primary flag, CLASS=METRIC. One entry or a
// list:
//
//	primary: interactive=ttft_p99_ms
//	primary: [interactive=ttft_p99_ms, batch=goodput_rps]
//
// The primaries are judged at the significance level as they are; every
// other metric is reported and Holm-corrected (bench/compare).
type Primaries []string

// UnmarshalYAML accepts one CLASS=METRIC string or a list of them.
func (p *Primaries) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		*p = Primaries{n.Value}
		return nil
	case yaml.SequenceNode:
		out := make(Primaries, 0, len(n.Content))
		for _, c := range n.Content {
			if c.Kind != yaml.ScalarNode {
				return fmt.Errorf("line %d: want CLASS=METRIC, for example interactive=ttft_p99_ms", c.Line)
			}
			out = append(out, c.Value)
		}
		*p = out
		return nil
	}
	return fmt.Errorf("line %d: want CLASS=METRIC or a list of them, for example interactive=ttft_p99_ms", n.Line)
}

// ParsePrimary splits one CLASS=METRIC and checks the metric against the
// ones a paired judgement reads (with a did-you-mean); the class is checked
// by the caller, who knows the classes.
func ParsePrimary(s string) (class, metric string, err error) {
	class, metric, ok := strings.Cut(strings.TrimSpace(s), "=")
	class, metric = strings.TrimSpace(class), strings.TrimSpace(metric)
	if !ok || class == "" || metric == "" {
		return "", "", fmt.Errorf("%q: want CLASS=METRIC, for example interactive=ttft_p99_ms", s)
	}
	if names := compare.MetricNames(); !slices.Contains(names, metric) {
		hint := ""
		if sg := suggest(metric, names); strings.HasPrefix(sg, " (did you mean") {
			hint = sg
		}
		return class, metric, fmt.Errorf("%q: metric %q is not one of %s%s", s, metric, strings.Join(names, ", "), hint)
	}
	return class, metric, nil
}

// Primary returns the declared primaries as class → metric (nil when none
// is declared). Call it on a validated Spec.
func (s *Spec) Primary() map[string]string {
	if len(s.Primaries) == 0 {
		return nil
	}
	out := make(map[string]string, len(s.Primaries))
	for _, p := range s.Primaries {
		if c, m, err := ParsePrimary(p); err == nil {
			out[c] = m
		}
	}
	return out
}

// validatePrimaries checks every entry of primary: its form, its metric, its
// class (one of the workload's) and one entry per class.
func (s *Spec) validatePrimaries() []error {
	var errs []error
	var classes []string
	for _, c := range s.Classes {
		classes = append(classes, c.Name)
	}
	seen := map[string]int{}
	for i, p := range s.Primaries {
		path := fmt.Sprintf("primary[%d]", i)
		c, _, err := ParsePrimary(p)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", path, err))
			if c == "" {
				continue
			}
		}
		if !slices.Contains(classes, c) {
			errs = append(errs, fmt.Errorf("%s: %q: no class %q in the workload%s", path, p, c, suggest(c, classes)))
		}
		if j, dup := seen[c]; dup {
			errs = append(errs, fmt.Errorf("%s: %q: class %q already has a primary (primary[%d]); one per class", path, p, c, j))
		} else {
			seen[c] = i
		}
	}
	return errs
}

// suggest names the closest of known to got, or lists them. Longer names
// may be further off ("ttft_p99" lacks the "_ms" of "ttft_p99_ms").
func suggest(got string, known []string) string {
	best, bestD := "", 3
	if len(got) >= 6 {
		bestD = 4
	}
	for _, n := range known {
		if d := editdist.Levenshtein(strings.ToLower(got), strings.ToLower(n)); d < bestD {
			best, bestD = n, d
		}
	}
	if best != "" {
		return fmt.Sprintf(" (did you mean %q?)", best)
	}
	k := slices.Clone(known)
	sort.Strings(k)
	return fmt.Sprintf(" (known: %s)", strings.Join(k, ", "))
}
