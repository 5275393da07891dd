package demo

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/llmesh/llmesh/bench/ab"
	"github.com/llmesh/llmesh/bench/report"
)

// pendingFile is an output written to a temporary file in the output
// directory, renamed to path once every output is ready.
type pendingFile struct{ tmp, path string }

// discard removes temporary files that will not be renamed into place.
func discard(ps []pendingFile) {
	for _, p := range ps {
		os.Remove(p.tmp)
	}
}

// writeOutputs writes ab.json, report.md, report.html and one JSON report
// per run (re-renderable with `llmesh bench report`), report.html first in
// the list returned. Each goes to a temporary file first; only when all of
// them (and the runs' records in runs) are written are they renamed into
// place, so a failure leaves the previous outputs whole.
func writeOutputs(o Options, res *ab.Result, runs []pendingFile) ([]string, error) {
	var ready []pendingFile
	write := func(name string, render func(io.Writer) error) error {
		var buf bytes.Buffer
		if err := render(&buf); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		f, err := os.CreateTemp(o.OutDir, "."+name+".*")
		if err != nil {
			return err
		}
		ready = append(ready, pendingFile{tmp: f.Name(), path: filepath.Join(o.OutDir, name)})
		_, err = f.Write(buf.Bytes())
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		return err
	}
	err := errors.Join(
		write("report.html", func(w io.Writer) error { return ab.HTML(w, res) }),
		write("report.md", func(w io.Writer) error { return markdown(w, res) }),
		write("ab.json", func(w io.Writer) error { return ab.WriteJSON(w, res) }),
	)
	for _, r := range res.Runs {
		if err != nil {
			break
		}
		name := fmt.Sprintf("run-%s-%d.json", armLabel(res, r), r.Repeat+1)
		err = write(name, func(w io.Writer) error { return report.WriteJSON(w, r.Report) })
	}
	ready = append(ready, runs...)
	if err != nil {
		discard(ready)
		return nil, fmt.Errorf("writing the outputs to %s (the previous ones were left as they were): %w", o.OutDir, err)
	}
	var files []string
	for i, p := range ready {
		// Temporary files are private; the outputs are not.
		if err := errors.Join(os.Chmod(p.tmp, 0o644), os.Rename(p.tmp, p.path)); err != nil {
			discard(ready[i:])
			return files, err
		}
		files = append(files, p.path)
	}
	return files, nil
}

// lastRuns returns each arm's last run, A first.
func lastRuns(res *ab.Result) []ab.Run {
	var a, b *ab.Run
	for i := range res.Runs {
		r := &res.Runs[i]
		switch armLabel(res, *r) {
		case res.A:
			a = r
		case res.B:
			b = r
		}
	}
	var out []ab.Run
	for _, r := range []*ab.Run{a, b} {
		if r != nil && r.Report != nil {
			out = append(out, *r)
		}
	}
	return out
}

func markdown(w io.Writer, res *ab.Result) error {
	fmt.Fprintf(w, "# llmesh demo: %s vs %s\n\n", res.A, res.B)
	fmt.Fprintf(w, "Workload `%s`, %d interleaved A/B pair(s) through the embedded gateway to the simulated engine.\n\n", res.Workload, res.Repeats)
	if err := ab.Markdown(w, res); err != nil {
		return err
	}
	for _, r := range lastRuns(res) {
		fmt.Fprintf(w, "\n## %s (run %d)\n\n", armLabel(res, r), r.Repeat+1)
		if err := report.Markdown(w, r.Report); err != nil {
			return err
		}
	}
	_, err := fmt.Fprintf(w, "\n## Verdict\n\n**%s**\n", res.Verdict)
	return err
}

// printSummary prints each arm's per-class SLO table and the comparison.
func printSummary(w io.Writer, o Options, res *ab.Result, engine map[string][]EngineTiming) {
	for _, r := range lastRuns(res) {
		fmt.Fprintf(w, "\n== %s (run %d) ==\n", armLabel(res, r), r.Repeat+1)
		_ = report.Table(w, r.Report)
	}
	fmt.Fprintln(w)
	for _, arm := range []string{res.A, res.B} {
		for i, t := range engine[arm] {
			fmt.Fprintf(w, "engine %s run %d: %d steps, %.1f s modelled; %d back-to-back steps woke late by p50 %.2f ms, p99 %.2f ms; fell behind the model by %.1f ms (%.2f%%)\n",
				arm, i+1, t.Steps, t.Model.Seconds(), t.BackToBack, ms(t.LateP50), ms(t.LateP99), ms(t.Drift), 100*t.Slowdown())
		}
	}
	// The comparison ends with the verdict: the last thing printed.
	fmt.Fprintln(w)
	_ = ab.Table(w, res)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// armLabel names a run by its arm's policy rather than "A" or "B".
func armLabel(res *ab.Result, r ab.Run) string {
	switch r.Arm {
	case "A":
		return res.A
	case "B":
		return res.B
	}
	return r.Arm
}
