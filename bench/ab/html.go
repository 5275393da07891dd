package ab

import (
	"bytes"
	"fmt"
	"html/template"
	"io"
	"strings"

	"github.com/llmesh/llmesh/bench/report"
	"github.com/llmesh/llmesh/bench/result"
)

// The A/B page puts the answer first: a verdict banner (green better, red
// worse, amber mixed, grey inconclusive or no difference), then the
// per-class comparison as a table with each cell coloured by its verdict
// and its 95% interval, then one row per run of each arm, charts that
// overlay every run of both arms, and each run's full report folded below.
// One file, no external assets: the per-run reports are srcdoc frames sized
// to their content.
var pageTemplate = template.Must(template.New("page").Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>llmesh A/B: {{.A}} vs {{.B}}</title>
<style>
body{font-family:system-ui,sans-serif;margin:1.5rem auto;max-width:1200px;padding:0 1rem;color:#1f2328}
h1{font-size:1.5rem;margin:.2rem 0 .6rem}
.verdict{padding:.8rem 1rem;border-radius:6px;font-size:1.1rem;font-weight:600;margin:.6rem 0 1rem;border-left:6px solid}
.v-better{background:#dafbe1;border-color:#1a7f37}.v-worse{background:#ffebe9;border-color:#cf222e}
.v-mixed{background:#fff8c5;border-color:#9a6700}.v-none{background:#eaeef2;border-color:#6e7781}
table{border-collapse:collapse;margin:.4rem 0 1rem;font-size:.92rem}
th,td{border:1px solid #d0d7de;padding:.25rem .55rem;text-align:right}
th{background:#f6f8fa}td.l,th.l{text-align:left}
td.better{background:#dafbe1}td.worse{background:#ffebe9}
.invalid{color:#cf222e;font-weight:600}.valid{color:#1a7f37}
details{margin:.6rem 0;border:1px solid #d0d7de;border-radius:6px;padding:.4rem .8rem}
summary{cursor:pointer;font-weight:600}
iframe{width:100%;border:0;min-height:200px}
.meta{color:#57606a}
</style></head><body>
<h1>llmesh A/B: {{.B}} (B) vs {{.A}} (A)</h1>
<div class="verdict {{.VerdictClass}}" id="verdict">{{.Verdict}}</div>
<p class="meta">Workload <code>{{.Workload}}</code>, {{.Repeats}} interleaved A/B pair(s) with paired seeds; deltas are B − A with 95% bootstrap intervals over requests pooled across repeats.</p>
<table id="comparison"><thead><tr><th class="l">class</th><th class="l">metric</th><th>A: {{.A}}</th><th>B: {{.B}}</th><th>B − A</th><th>95% CI</th><th class="l">verdict</th></tr></thead><tbody>
{{range .Rows}}<tr><td class="l">{{.Class}}</td><td class="l">{{.Metric}}</td><td>{{.A}}</td><td>{{.B}}</td><td class="{{.Tone}}">{{.Diff}}</td><td class="{{.Tone}}">{{.CI}}</td><td class="l {{.Tone}}">{{.Verdict}}</td></tr>
{{end}}</tbody></table>
<h2>Paired over repeats</h2>
<div id="paired">{{.Paired}}</div>
{{if .Provenance}}<details id="provenance"><summary>provenance</summary><table>{{range .Provenance}}<tr><td class="l">{{index . 0}}</td><td class="l"><code>{{index . 1}}</code></td></tr>{{end}}</table></details>
{{end}}<h2>Runs</h2>
<table id="runs"><thead><tr><th class="l">run</th><th class="l">arm</th><th>seed</th><th>requests ok / failed</th><th>achieved req/s</th><th>schedule lag p99 ms</th><th class="l">validity</th>{{range .Classes}}<th>{{.}} TTFT p99 ms</th><th>{{.}} attainment</th>{{end}}</tr></thead><tbody>
{{range .Runs}}<tr><td class="l">{{.Name}}</td><td class="l">{{.Arm}}</td><td>{{.Seed}}</td><td>{{.OK}} / {{.Failed}}</td><td>{{.RPS}}</td><td>{{.Lag}}</td><td class="l {{if .Valid}}valid{{else}}invalid{{end}}">{{.Validity}}</td>{{range .Cells}}<td>{{.}}</td>{{end}}</tr>
{{end}}</tbody></table>
<h2>Charts</h2>
<p class="meta">Every run of both arms: arm A in blue, B in vermilion; solid, dashed and dotted lines are pairs 1, 2 and 3 (then repeating).</p>
{{range .Charts}}{{.}}
{{end}}<h2>Reports of every run</h2>
{{range .Runs}}<details><summary>{{.Name}}: {{.Arm}}</summary>
<iframe title="{{.Name}}" srcdoc="{{.Doc}}" onload="this.style.height=(this.contentDocument.documentElement.scrollHeight+20)+'px'"></iframe>
</details>
{{end}}</body></html>
`))

type pageRow struct{ Class, Metric, A, B, Diff, CI, Verdict, Tone string }

type pageRun struct {
	Name, Arm, Seed, RPS, Lag, Validity, Doc string
	OK, Failed                               int
	Valid                                    bool
	Cells                                    []string
}

// verdictClass picks the banner colour from the verdict line.
func verdictClass(r *Result) string {
	v := strings.ToLower(r.Verdict)
	switch {
	case !r.Valid || strings.HasPrefix(r.Verdict, Inconclusive):
		return "v-none"
	case strings.Contains(v, "mixed"):
		return "v-mixed"
	case strings.Contains(v, Worse):
		return "v-worse"
	case strings.Contains(v, Better):
		return "v-better"
	}
	return "v-none"
}

// HTML writes one self-contained page: the verdict and the per-class
// comparison first, then every run of both arms and their full reports.
func HTML(w io.Writer, res *Result) error {
	data := struct {
		A, B, Workload, Verdict, VerdictClass string
		Repeats                               int
		Rows                                  []pageRow
		Classes                               []string
		Runs                                  []pageRun
		Charts                                []template.HTML
		Paired                                template.HTML
		Provenance                            [][2]string
	}{A: res.A, B: res.B, Workload: res.Workload, Verdict: res.Verdict, VerdictClass: verdictClass(res), Repeats: res.Repeats}
	data.Classes = classOrder(res)
	var paired bytes.Buffer
	if err := writePaired(&paired, res); err != nil {
		return err
	}
	data.Paired = template.HTML("<pre>" + template.HTMLEscapeString(strings.TrimSpace(paired.String())) + "</pre>")
	if res.Provenance != nil {
		data.Provenance = res.Provenance.Rows()
	}
	for _, c := range data.Classes {
		for _, d := range res.Classes[c] {
			cells := cell(d)
			tone := ""
			if res.Valid && (d.Verdict == Better || d.Verdict == Worse) {
				tone = d.Verdict
			}
			data.Rows = append(data.Rows, pageRow{Class: c, Metric: cells[0], A: cells[1], B: cells[2], Diff: cells[3], CI: cells[4], Verdict: cells[5], Tone: tone})
		}
	}
	for _, r := range res.Runs {
		if r.Report == nil {
			continue
		}
		rep := r.Report
		pr := pageRun{
			Name: fmt.Sprintf("pair %d, %s", r.Repeat+1, r.Arm), Arm: armLabel(res, r), Seed: fmt.Sprint(r.Seed),
			OK: rep.Completed, Failed: rep.Failed, RPS: num(rep.AchievedRPS), Lag: num(rep.ScheduleLagMs.P99),
			Valid: rep.Valid, Validity: report.Validity(rep),
		}
		for _, c := range data.Classes {
			if cr := rep.Classes[c]; cr != nil {
				pr.Cells = append(pr.Cells, num(cr.TTFTMs.P99), fmt.Sprintf("%.1f%%", 100*cr.SLOAttainment))
			} else {
				pr.Cells = append(pr.Cells, "—", "—")
			}
		}
		var doc bytes.Buffer
		if err := report.HTML(&doc, rep); err != nil {
			return err
		}
		pr.Doc = doc.String()
		data.Runs = append(data.Runs, pr)
	}
	data.Charts = abCharts(res, data.Classes)
	return pageTemplate.Execute(w, data)
}

// pairDash tells a run's pair apart within its arm's colour.
var pairDash = []string{"", "9 5", "2 4", "12 4 2 4"}

// abCharts overlays every run of both arms: the TTFT CDF of each class, then
// P99 TTFT, throughput, queue depth and preemptions over time.
func abCharts(res *Result, classes []string) []template.HTML {
	type line struct {
		run Run
		s   report.Series
	}
	var runs []line
	for _, r := range res.Runs {
		if r.Report == nil {
			continue
		}
		c := report.Palette[0]
		if r.Arm == "B" {
			c = report.Palette[1]
		}
		runs = append(runs, line{run: r, s: report.Series{
			Name: fmt.Sprintf("%s: %s, pair %d", r.Arm, armLabel(res, r), r.Repeat+1), Color: c, Dash: pairDash[r.Repeat%len(pairDash)]}})
	}
	each := func(v func(*result.Report) [][2]float64) []report.Series {
		out := make([]report.Series, len(runs))
		for i, l := range runs {
			out[i] = l.s
			out[i].XY = v(l.run.Report)
		}
		return out
	}
	var charts []report.Chart
	for _, c := range classes {
		charts = append(charts, report.CDFChart("TTFT CDF: "+c, each(func(rep *result.Report) [][2]float64 {
			if cr := rep.Classes[c]; cr != nil {
				return cr.TTFTCDF
			}
			return nil
		})))
	}
	bucket := func(v func(result.Bucket) (float64, bool)) []report.Series {
		return each(func(rep *result.Report) [][2]float64 { return report.TimeSeries(rep, v) })
	}
	meshQueue, format2 := len(runs) > 0, len(runs) > 0
	for _, l := range runs {
		meshQueue = meshQueue && report.MeshQueueMeasured(l.run.Report)
		format2 = format2 && l.run.Report.TimelineFormat >= result.TimelineFormat
	}
	queue := report.Chart{Title: "Waiting for a first token over time (all classes)", XLabel: "time (s)", YLabel: "requests",
		Series: bucket(func(b result.Bucket) (float64, bool) { return float64(b.Queued), true })}
	if meshQueue {
		queue = report.Chart{Title: "Queue depth in llmesh over time (from Server-Timing queue times)", XLabel: "time (s)", YLabel: "requests waiting for admission",
			Series: bucket(func(b result.Bucket) (float64, bool) { return float64(b.MeshQueued), true })}
	}
	if format2 {
		for _, c := range classes {
			charts = append(charts, report.Chart{Title: "P99 TTFT over time: " + c + " (requests finishing in each bucket)", XLabel: "time (s)", YLabel: "ms",
				Series: bucket(func(b result.Bucket) (float64, bool) { v, ok := b.ClassTTFTP99Ms[c]; return v, ok })})
		}
	} else {
		charts = append(charts, report.Chart{Title: "P99 TTFT over time (all classes, requests finishing in each bucket)", XLabel: "time (s)", YLabel: "ms",
			Series: bucket(func(b result.Bucket) (float64, bool) { return b.TTFTP99Ms, b.Done > 0 })})
	}
	charts = append(charts,
		report.Chart{Title: "Throughput over time", XLabel: "time (s)", YLabel: "output tokens/s",
			Series: bucket(func(b result.Bucket) (float64, bool) { return b.OutputTokensPerS, true })},
		queue,
	)
	if format2 && meshQueue {
		charts = append(charts, report.Chart{Title: "Preemptions over time (counted when the preempted request ends)", XLabel: "time (s)", YLabel: "preemptions",
			Series: bucket(func(b result.Bucket) (float64, bool) { return float64(b.Preemptions), true })})
	}
	out := make([]template.HTML, len(charts))
	for i, c := range charts {
		out[i] = c.HTML()
	}
	if !meshQueue {
		// Without llmesh's Server-Timing a transparent requeue or
		// continuation is invisible to the client: zeros would mislead.
		out = append(out, `<p class="meta">No queue depth in llmesh and no preemptions over time: the targets sent no llmesh Server-Timing (mesh config <code>telemetry.server_timing: true</code>).</p>`)
	}
	return out
}

// armLabel names a run by its arm's target name rather than "A" or "B".
func armLabel(res *Result, r Run) string {
	switch r.Arm {
	case "A":
		return res.A
	case "B":
		return res.B
	}
	return r.Arm
}
