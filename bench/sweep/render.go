package sweep

import (
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"strings"

	"github.com/llmesh/llmesh/bench/report"
)

// Formats are the renderers of a sweep, as --format names them.
var Formats = []string{"table", "json", "markdown", "html"}

// Render writes r in format (one of Formats).
func Render(w io.Writer, r *Result, format string) error {
	switch format {
	case "table":
		return Table(w, r)
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	case "markdown":
		return Markdown(w, r)
	case "html":
		return HTML(w, r)
	}
	return fmt.Errorf("sweep: format %q must be one of %s", format, strings.Join(Formats, ", "))
}

// Markdown writes the points as a table and the findings below it.
func Markdown(w io.Writer, r *Result) error {
	names := classNames(r)
	var b strings.Builder
	fmt.Fprintf(&b, "# llmesh bench sweep: %s against %s\n\n", r.Workload, r.Target)
	b.WriteString("| rate | achieved req/s | goodput req/s | valid |")
	for _, n := range names {
		fmt.Fprintf(&b, " %s TTFT p99 ms | %s TPOT p99 ms | %s attainment |", n, n, n)
	}
	b.WriteString("\n|---:|---:|---:|---|" + strings.Repeat("---:|---:|---:|", len(names)) + "\n")
	for _, p := range r.Points {
		fmt.Fprintf(&b, "| %g | %.2f | %.2f | %v |", p.Rate, p.AchievedRPS, p.GoodputRPS, p.Valid)
		for _, n := range names {
			c := p.Classes[n]
			if c == nil {
				b.WriteString(" – | – | – |")
				continue
			}
			mark := ""
			if !c.WithinSLO {
				mark = " *"
			}
			fmt.Fprintf(&b, " %.1f%s | %.1f | %.1f%% |", c.TTFTP99Ms, mark, c.TPOTP99Ms, 100*c.SLOAttainment)
		}
		b.WriteString("\n")
	}
	b.WriteString("\n\\* P99 over the class SLO.\n\n")
	for _, l := range summary(r) {
		b.WriteString("- " + l + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

var page = template.Must(template.New("sweep").Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>llmesh sweep: {{.R.Workload}}</title>
<style>
body{font-family:system-ui,sans-serif;margin:1.5rem auto;max-width:1200px;padding:0 1rem;color:#1f2328}
h1{font-size:1.5rem;margin:.2rem 0 .6rem}
.findings{padding:.8rem 1rem;border-radius:6px;border-left:6px solid #0969da;background:#ddf4ff;margin:.6rem 0 1rem}
.findings li{margin:.2rem 0}
table{border-collapse:collapse;margin:.4rem 0 1rem;font-size:.92rem}
th,td{border:1px solid #d0d7de;padding:.25rem .55rem;text-align:right}
th{background:#f6f8fa}td.over{background:#ffebe9}.invalid{color:#cf222e;font-weight:600}
.note{color:#57606a}
</style></head><body>
<h1>llmesh sweep: {{.R.Workload}} against {{.R.Target}}</h1>
<ul class="findings" id="findings">{{range .Summary}}<li>{{.}}</li>{{end}}</ul>
<table id="points"><thead><tr><th>rate</th><th>achieved req/s</th><th>goodput req/s</th><th>valid</th>{{range .Names}}<th>{{.}} TTFT p99 ms</th><th>{{.}} TPOT p99 ms</th><th>{{.}} attainment</th>{{end}}</tr></thead><tbody>
{{range .Rows}}<tr>{{range .}}<td{{if .Class}} class="{{.Class}}"{{end}}>{{.Text}}</td>{{end}}</tr>
{{end}}</tbody></table>
<p class="note">Shaded: P99 over the class SLO. The JSON (--json) holds every run's full report.</p>
{{range .Charts}}{{.}}
{{end}}</body></html>
`))

type htmlCell struct{ Text, Class string }

// HTML writes one self-contained page: the findings, the points and charts
// of P99 TTFT, attainment and goodput against the offered rate.
func HTML(w io.Writer, r *Result) error {
	names := classNames(r)
	var rows [][]htmlCell
	for _, p := range r.Points {
		valid := htmlCell{Text: "valid"}
		if !p.Valid {
			valid = htmlCell{Text: "INVALID", Class: "invalid"}
		}
		row := []htmlCell{{Text: fmt.Sprintf("%g", p.Rate)}, {Text: fmt.Sprintf("%.2f", p.AchievedRPS)}, {Text: fmt.Sprintf("%.2f", p.GoodputRPS)}, valid}
		for _, n := range names {
			c := p.Classes[n]
			if c == nil {
				row = append(row, htmlCell{Text: "–"}, htmlCell{Text: "–"}, htmlCell{Text: "–"})
				continue
			}
			over := ""
			if !c.WithinSLO {
				over = "over"
			}
			row = append(row, htmlCell{Text: fmt.Sprintf("%.1f", c.TTFTP99Ms), Class: over}, htmlCell{Text: fmt.Sprintf("%.1f", c.TPOTP99Ms), Class: over},
				htmlCell{Text: fmt.Sprintf("%.1f%%", 100*c.SLOAttainment)})
		}
		rows = append(rows, row)
	}
	perClass := func(v func(*PointClass) float64) []report.Series {
		var out []report.Series
		for _, n := range names {
			s := report.Series{Name: n}
			for _, p := range r.Points {
				if c := p.Classes[n]; c != nil {
					s.XY = append(s.XY, [2]float64{p.Rate, v(c)})
				}
			}
			out = append(out, s)
		}
		return out
	}
	total := report.Series{Name: "all classes"}
	achieved := report.Series{Name: "achieved req/s"}
	for _, p := range r.Points {
		total.XY = append(total.XY, [2]float64{p.Rate, p.GoodputRPS})
		achieved.XY = append(achieved.XY, [2]float64{p.Rate, p.AchievedRPS})
	}
	charts := []report.Chart{
		{Title: "P99 TTFT against offered rate", XLabel: "offered rate", YLabel: "ms", Series: perClass(func(c *PointClass) float64 { return c.TTFTP99Ms })},
		{Title: "SLO attainment against offered rate", XLabel: "offered rate", YLabel: "share of requests", YMax: 1, Series: perClass(func(c *PointClass) float64 { return c.SLOAttainment })},
		{Title: "Goodput and throughput against offered rate", XLabel: "offered rate", YLabel: "req/s",
			Series: append([]report.Series{achieved, total}, perClass(func(c *PointClass) float64 { return c.GoodputRPS })...)},
	}
	var hs []template.HTML
	for _, c := range charts {
		hs = append(hs, c.HTML())
	}
	return page.Execute(w, map[string]any{"R": r, "Summary": summary(r), "Names": names, "Rows": rows, "Charts": hs})
}

// ErrNoOperatingPoint is the --slo-gate failure of a sweep: no valid rate
// had every class at its attainment target.
var ErrNoOperatingPoint = errors.New("no valid rate met every class's attainment target")

// ErrNoValidRun is the --slo-gate failure of a sweep whose runs were all
// invalid: nothing can be judged.
var ErrNoValidRun = errors.New("no run of the sweep was valid")

// Gate judges a sweep for --slo-gate: ErrNoValidRun when no run was valid,
// ErrNoOperatingPoint when no valid rate had every class at its target.
func Gate(r *Result) error {
	valid := false
	for _, p := range r.Points {
		valid = valid || p.Valid
	}
	switch {
	case !valid:
		return ErrNoValidRun
	case r.MaxGoodputRPS == 0:
		return ErrNoOperatingPoint
	}
	return nil
}
