// Command headline renders the README's headline results from recorded runs:
// the virtual-time policy comparison (`llmesh bench simulate --json FILE`) and the
// real-time demo A/B (`llmesh demo`'s ab.json). It writes the table between
// the README's headline markers, so the numbers there always come from files
// a command produced, never from typing. `make headline` records and renders.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

const (
	startMarker = "<!-- headline:start -->"
	endMarker   = "<!-- headline:end -->"
)

type simulateFile struct {
	Workload   string `json:"workload"`
	Profile    string `json:"profile"`
	Saturation struct {
		RPS float64 `json:"rps"`
	} `json:"saturation"`
	Comparison []struct {
		PolicyName          string  `json:"policy"`
		Load                float64 `json:"load"`
		UrgentClass         string  `json:"urgent_class"`
		UrgentP99TTFTMs     float64 `json:"urgent_p99_ttft_ms"`
		UrgentP99TTFTRatio  float64 `json:"urgent_p99_ttft_ratio"`
		OtherGoodputRel     float64 `json:"other_goodput_rel"`
		OtherOutputTokRel   float64 `json:"other_output_tokens_rel"`
		RecomputedOfOutput  float64 `json:"recomputed_of_output"`
		RecomputedOfCompute float64 `json:"recomputed_of_computed"`
		Preemptions         int     `json:"preemptions"`
	} `json:"comparison"`
	Runs []struct {
		Duration float64 `json:"duration"`
	} `json:"runs"`
}

type abFile struct {
	Workload string `json:"workload"`
	A        string `json:"a"`
	B        string `json:"b"`
	Repeats  int    `json:"repeats"`
	Summary  string `json:"summary"`
	// Verdict is the paired status ("mixed", "better", …) in files written
	// since bench ab gained paired verdicts, and the one-line summary in
	// older ones (then "verdict: B … vs A …"); summary() picks.
	Verdict string `json:"verdict"`
	Valid   bool   `json:"valid"`
	// Paired is the comparison over repeats that the verdict and the gates
	// use (absent in files written before paired verdicts).
	Paired *struct {
		Alpha   float64 `json:"alpha"`
		Verdict string  `json:"verdict"`
		Metrics []struct {
			Name     string  `json:"name"`
			Primary  bool    `json:"primary"`
			RelDelta float64 `json:"rel_delta"`
			CILow    float64 `json:"ci_low"`
			CIHigh   float64 `json:"ci_high"`
			P        float64 `json:"p_adjusted"`
			Status   string  `json:"status"`
		} `json:"metrics"`
	} `json:"paired"`
	Classes map[string][]struct {
		Metric  string  `json:"metric"`
		A       float64 `json:"a"`
		B       float64 `json:"b"`
		DiffPct float64 `json:"diff_pct"`
		CILow   float64 `json:"ci_low"`
		CIHigh  float64 `json:"ci_high"`
		Verdict string  `json:"verdict"`
	} `json:"classes"`
	Runs []struct {
		Report struct {
			RequestRate float64 `json:"request_rate"`
			Duration    float64 `json:"duration"`
		} `json:"report"`
	} `json:"runs"`
}

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "headline:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("headline", flag.ContinueOnError)
	simPath := fs.String("simulate", "results/simulate.json", "output of llmesh bench simulate --json FILE")
	abPath := fs.String("ab", "results/demo/ab.json", "ab.json written by llmesh demo")
	readme := fs.String("readme", "", "README to update between the headline markers (empty: print)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var sim simulateFile
	if err := readJSON(*simPath, &sim); err != nil {
		return err
	}
	var ab abFile
	if err := readJSON(*abPath, &ab); err != nil {
		return err
	}
	var buf bytes.Buffer
	renderSimulate(&buf, &sim, *simPath)
	buf.WriteString("\n")
	renderAB(&buf, &ab, *abPath)
	if *readme == "" {
		_, err := stdout.Write(buf.Bytes())
		return err
	}
	return replace(*readme, buf.String())
}

func readJSON(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

func renderSimulate(w io.Writer, s *simulateFile, path string) {
	dur := 0.0
	if len(s.Runs) > 0 {
		dur = s.Runs[0].Duration
	}
	fmt.Fprintf(w, "**Virtual time** (`%s`, engine `%s`, saturation %.2f req/s; runs of %.0f s of arrivals; from `%s`).\n",
		s.Workload, s.Profile, s.Saturation.RPS, dur, path)
	fmt.Fprintf(w, "Interactive P99 TTFT (× its load-0.05 value), batch goodput relative to the best non-preemptive policy, and\n")
	fmt.Fprintf(w, "tokens recomputed because of preemption (share of all computed tokens / of output tokens):\n\n")
	loads := map[float64]bool{}
	policies := map[string]bool{}
	for _, c := range s.Comparison {
		loads[c.Load] = true
		policies[c.PolicyName] = true
	}
	ls := keys(loads)
	ps := make([]string, 0, len(policies))
	for p := range policies {
		ps = append(ps, p)
	}
	sort.Strings(ps)
	fmt.Fprintf(w, "| load | %s |\n|---|%s\n", strings.Join(ps, " | "), strings.Repeat("---|", len(ps)))
	for _, l := range ls {
		row := []string{fmt.Sprintf("%.2f", l)}
		for _, p := range ps {
			cell := "—"
			for _, c := range s.Comparison {
				if c.Load != l || c.PolicyName != p {
					continue
				}
				cell = fmt.Sprintf("%s ms", num(c.UrgentP99TTFTMs))
				if c.UrgentP99TTFTRatio > 0 {
					cell += fmt.Sprintf(" (%.2f×)", c.UrgentP99TTFTRatio)
				}
				cell += fmt.Sprintf("; batch %.1f%%", 100*c.OtherGoodputRel)
				if c.Preemptions > 0 {
					cell += fmt.Sprintf("; recomputed %.2f%% / %.1f%%", 100*c.RecomputedOfCompute, 100*c.RecomputedOfOutput)
				}
			}
			row = append(row, cell)
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(row, " | "))
	}
}

func renderAB(w io.Writer, a *abFile, path string) {
	rate, dur := 0.0, 0.0
	if len(a.Runs) > 0 {
		rate, dur = a.Runs[0].Report.RequestRate, a.Runs[0].Report.Duration
	}
	valid := "all runs valid"
	if !a.Valid {
		valid = "at least one run flagged invalid by the harness (schedule lag over its 1 ms budget on this shared 2-core machine)"
	}
	fmt.Fprintf(w, "**Real time** (`llmesh demo`: gateway → simulated engine on loopback, %d interleaved A/B pair(s), %.2f req/s, runs of about %.0f s; %s; from `%s`):\n\n",
		a.Repeats, rate, dur, valid, path)
	fmt.Fprintf(w, "| class | metric | %s | %s | B vs A | 95%% CI of B − A | verdict |\n|---|---|---|---|---|---|---|\n", a.A, a.B)
	classes := make([]string, 0, len(a.Classes))
	for c := range a.Classes {
		classes = append(classes, c)
	}
	sort.Strings(classes)
	for _, c := range classes {
		for _, d := range a.Classes[c] {
			switch d.Metric {
			case "ttft_p99_ms", "slo_attainment", "goodput_rps":
			default:
				continue
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s | %+.1f%% | [%s, %s] | %s |\n", c, d.Metric, num(d.A), num(d.B), d.DiffPct, num(d.CILow), num(d.CIHigh), d.Verdict)
		}
	}
	fmt.Fprintf(w, "\nPer request (requests pooled over the repeats): %s\n", a.summary())
	if a.Paired != nil {
		fmt.Fprintf(w, "\nVerdict, paired over the %d repeats (what `--fail-on` gates): **%s**", a.Repeats, a.Paired.Verdict)
		for _, m := range a.Paired.Metrics {
			if m.Primary {
				fmt.Fprintf(w, "; primary %s %+.1f%% (95%% interval of B − A [%s, %s], p = %.2g, %s)",
					m.Name, 100*m.RelDelta, num(m.CILow), num(m.CIHigh), m.P, m.Status)
			}
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "\nReproduce: `make headline` (runs `llmesh bench simulate --json FILE` and `llmesh demo`, then this renderer).\n")
}

// summary is the file's one-line verdict, from the summary field or, in a
// file written before it existed, the verdict field that held it.
func (a *abFile) summary() string {
	s := a.Summary
	if s == "" && strings.HasPrefix(a.Verdict, "verdict: ") {
		s = a.Verdict
	}
	return strings.TrimPrefix(s, "verdict: ")
}

func num(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v >= 100 || v <= -100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10 || v <= -10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.3g", v)
	}
}

func keys(m map[float64]bool) []float64 {
	out := make([]float64, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Float64s(out)
	return out
}

func replace(path, body string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	s := string(data)
	i := strings.Index(s, startMarker)
	j := strings.Index(s, endMarker)
	if i < 0 || j < i {
		return errors.New(path + ": headline markers not found")
	}
	out := s[:i+len(startMarker)] + "\n" + body + s[j:]
	return os.WriteFile(path, []byte(out), 0o644)
}
