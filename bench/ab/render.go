package ab

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/llmesh/llmesh/bench/compare"
)

// WriteJSON writes the result as indented JSON.
func WriteJSON(w io.Writer, r *Result) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// classOrder lists the compared classes most urgent first (by the
// priority the runs report), then by name.
func classOrder(r *Result) []string {
	prio := map[string]int{}
	for _, run := range r.Runs {
		if run.Report == nil {
			continue
		}
		for n, c := range run.Report.Classes {
			if _, ok := prio[n]; !ok && c != nil {
				prio[n] = c.Priority
			}
		}
	}
	var names []string
	for n := range r.Classes {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		if a, b := prio[names[i]], prio[names[j]]; a != b {
			return a < b
		}
		return names[i] < names[j]
	})
	return names
}

func cell(d Delta) []string {
	pct := ""
	if d.A != 0 {
		pct = fmt.Sprintf(" (%+.1f%%)", d.DiffPct)
	}
	v := d.Verdict
	if v == "" {
		v = "—" // an inconclusive A/B gives no per-metric verdict
	}
	return []string{d.Metric, num(d.A), num(d.B), num(d.Diff) + pct, "[" + num(d.CILow) + ", " + num(d.CIHigh) + "]", v}
}

func num(v float64) string {
	switch a := max(v, -v); {
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 1:
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.4f", v)
}

// Table writes the terminal comparison.
func Table(w io.Writer, r *Result) error {
	fmt.Fprintf(w, "A/B on %s: A = %s, B = %s, %d repeats interleaved A B A B …\n", r.Workload, r.A, r.B, r.Repeats)
	if !r.Valid {
		fmt.Fprintln(w, "WARNING: at least one run was invalid; see the runs in the JSON output")
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "class\tmetric\tA\tB\tB − A\t95% CI\tverdict")
	for _, c := range classOrder(r) {
		for _, d := range r.Classes[c] {
			fmt.Fprintln(tw, c+"\t"+strings.Join(cell(d), "\t"))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, l := range inMeshLines(r) {
		fmt.Fprintln(w, l)
	}
	for _, l := range retryLines(r) {
		fmt.Fprintln(w, l)
	}
	if _, err := fmt.Fprintln(w, r.Verdict); err != nil {
		return err
	}
	if err := writePaired(w, r); err != nil {
		return err
	}
	if r.Provenance != nil {
		fmt.Fprintln(w)
		return r.Provenance.WriteText(w)
	}
	return nil
}

// writePaired writes the paired judgement over repeats: the verdict that
// gates and the JSON's top-level verdict use.
func writePaired(w io.Writer, r *Result) error {
	fmt.Fprintf(w, "\nPaired over the %d repeats (the verdict gates use):\n", r.Repeats)
	if r.Paired == nil {
		if err := compare.WriteMarkdown(w, &compare.Result{Verdict: compare.Inconclusive}, r.Gates); err != nil {
			return err
		}
		if r.PairedNote == "" {
			return nil
		}
		_, err := fmt.Fprintf(w, "(%s)\n", r.PairedNote)
		return err
	}
	if err := compare.WriteMarkdown(w, r.Paired, r.Gates); err != nil {
		return err
	}
	return writePrimary(w, r)
}

// writePrimary names the primary metrics and where they came from, when
// the caller said (PrimaryFrom).
func writePrimary(w io.Writer, r *Result) error {
	if r.PrimaryFrom == "" {
		return nil
	}
	if len(r.Primary) == 0 {
		_, err := fmt.Fprintln(w, "Primary metrics: none declared; every metric decides the verdict (Holm-corrected).")
		return err
	}
	var ps []string
	for c, m := range r.Primary {
		ps = append(ps, c+"."+m)
	}
	sort.Strings(ps)
	_, err := fmt.Fprintf(w, "Primary metrics: %s (from %s).\n", strings.Join(ps, ", "), r.PrimaryFrom)
	return err
}

// retryLines say which pairs were run again and why.
func retryLines(r *Result) []string {
	var out []string
	for _, x := range r.Retried {
		out = append(out, fmt.Sprintf("repeat %d (seed %d) run again after attempt %d: %s", x.Repeat+1, x.Seed, x.Attempt, strings.Join(x.Reasons, " / ")))
	}
	return out
}

// Markdown writes the comparison as a Markdown section.
func Markdown(w io.Writer, r *Result) error {
	fmt.Fprintf(w, "## A/B: %s — A = %s, B = %s (%d repeats)\n\n", r.Workload, r.A, r.B, r.Repeats)
	fmt.Fprintln(w, "| class | metric | A | B | B − A | 95% CI | verdict |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---|")
	for _, c := range classOrder(r) {
		for _, d := range r.Classes[c] {
			fmt.Fprintf(w, "| %s | %s |\n", c, strings.Join(cell(d), " | "))
		}
	}
	if lines := append(inMeshLines(r), retryLines(r)...); len(lines) > 0 {
		fmt.Fprintln(w)
		for _, l := range lines {
			fmt.Fprintf(w, "- %s\n", l)
		}
	}
	if _, err := fmt.Fprintf(w, "\n**%s**\n", r.Verdict); err != nil {
		return err
	}
	if err := writePaired(w, r); err != nil {
		return err
	}
	if r.Provenance != nil {
		return r.Provenance.WriteMarkdown(w)
	}
	return nil
}
