package ab

import (
	"bytes"
	"fmt"
	"html/template"
	"io"
	"strings"

	"github.com/llmesh/llmesh/bench/report"
)

// The A/B page puts the answer first: a verdict banner (green better, red
// worse, amber mixed, grey inconclusive or no difference), then the
// per-class comparison as a table with each cell coloured by its verdict
// and its 95% interval, then one row per run of each arm, and each run's
// full report (charts included) folded below. One file, no external assets:
// the per-run reports are srcdoc frames sized to their content.
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
<h2>Runs</h2>
<table id="runs"><thead><tr><th class="l">run</th><th class="l">arm</th><th>seed</th><th>requests ok / failed</th><th>achieved req/s</th><th>schedule lag p99 ms</th><th class="l">validity</th>{{range .Classes}}<th>{{.}} TTFT p99 ms</th><th>{{.}} attainment</th>{{end}}</tr></thead><tbody>
{{range .Runs}}<tr><td class="l">{{.Name}}</td><td class="l">{{.Arm}}</td><td>{{.Seed}}</td><td>{{.OK}} / {{.Failed}}</td><td>{{.RPS}}</td><td>{{.Lag}}</td><td class="l {{if .Valid}}valid{{else}}invalid{{end}}">{{.Validity}}</td>{{range .Cells}}<td>{{.}}</td>{{end}}</tr>
{{end}}</tbody></table>
<h2>Reports of every run</h2>
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
	}{A: res.A, B: res.B, Workload: res.Workload, Verdict: res.Verdict, VerdictClass: verdictClass(res), Repeats: res.Repeats}
	data.Classes = classOrder(res)
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
	return pageTemplate.Execute(w, data)
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
