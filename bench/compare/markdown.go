package compare

import (
	"fmt"
	"io"
	"strings"
)

// WriteMarkdown writes r and the gate outcomes as a summary fit for a
// pull-request comment. An inconclusive comparison shows no per-metric
// verdicts, only what to do about it.
func WriteMarkdown(w io.Writer, r *Result, gates []GateResult) error {
	var b strings.Builder
	fmt.Fprintf(&b, "### A/B verdict: **%s**\n\n", r.Verdict)
	if r.Verdict == Inconclusive {
		b.WriteString("The comparison cannot tell the arms apart: run more seeds or repeats; in real time pin cores, lower the rate or use an idle host.\n")
	} else {
		fmt.Fprintf(&b, "Paired over units, %.0f%% intervals; primary metrics at alpha %.2g, others Holm-corrected.\n\n", 100*(1-r.Alpha), r.Alpha)
		b.WriteString("| metric | A | B | change | interval | p (adj) | MDE | status |\n|---|---|---|---|---|---|---|---|\n")
		for _, j := range r.Metrics {
			name := j.Name
			if j.Primary {
				name = "**" + name + "**"
			}
			status := string(j.Status)
			if j.Reason != "" {
				status += " (" + j.Reason + ")"
			}
			fmt.Fprintf(&b, "| %s | %.4g | %.4g | %+.2f%% | [%.4g, %.4g] | %.3g | %.4g | %s |\n",
				name, j.MeanA, j.MeanB, 100*j.RelDelta, j.CILow, j.CIHigh, j.PAdjusted, j.MDE, status)
		}
	}
	if len(gates) > 0 {
		b.WriteString("\n| gate | outcome |\n|---|---|\n")
		for _, g := range gates {
			out := "pass"
			if g.Breached {
				out = "**breached**"
			}
			fmt.Fprintf(&b, "| `%s` | %s: %s |\n", g.Gate, out, g.Reason)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
