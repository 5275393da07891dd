package ab

import (
	"fmt"
	"sort"
	"strings"
)

// inMeshLines says, per class, how many preemptions each arm's runs had
// and how long requests queued in llmesh (Server-Timing, mean of the runs'
// p50s), where any run reported them: behind a gateway that resumes
// preempted requests transparently, the client records alone would say 0.
func inMeshLines(r *Result) []string {
	type acc struct {
		preempt      [2]int
		queueP50     [2]float64
		queueRuns    [2]int
		seenAnything bool
	}
	per := map[string]*acc{}
	for _, run := range r.Runs {
		if run.Report == nil {
			continue
		}
		arm := 0
		if run.Arm == "B" {
			arm = 1
		}
		for name, c := range run.Report.Classes {
			a := per[name]
			if a == nil {
				a = &acc{}
				per[name] = a
			}
			a.preempt[arm] += c.Preemptions
			if c.Preemptions > 0 {
				a.seenAnything = true
			}
			if c.QueueMs != nil {
				a.queueP50[arm] += c.QueueMs.P50
				a.queueRuns[arm]++
				a.seenAnything = true
			}
		}
	}
	var names []string
	for n, a := range per {
		if a.seenAnything {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	var out []string
	for _, n := range names {
		a := per[n]
		parts := []string{fmt.Sprintf("preemptions A %d, B %d", a.preempt[0], a.preempt[1])}
		if a.queueRuns[0]+a.queueRuns[1] > 0 {
			q := func(i int) string {
				if a.queueRuns[i] == 0 {
					return "-"
				}
				return fmt.Sprintf("%.1f ms", a.queueP50[i]/float64(a.queueRuns[i]))
			}
			parts = append(parts, fmt.Sprintf("llmesh queue p50 A %s, B %s", q(0), q(1)))
		}
		out = append(out, fmt.Sprintf("%s in llmesh: %s", n, strings.Join(parts, "; ")))
	}
	return out
}
