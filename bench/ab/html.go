package ab

import (
	"bytes"
	"fmt"
	"html/template"
	"io"

	"github.com/llmesh/llmesh/bench/report"
)

var pageTemplate = template.Must(template.New("page").Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>llmesh A/B: {{.A}} vs {{.B}}</title>
<style>
body{font-family:system-ui,sans-serif;margin:2rem;max-width:1200px}
pre{background:#f6f8fa;padding:1rem;overflow-x:auto}
iframe{width:100%;height:1400px;border:1px solid #ddd;margin-top:.5rem}
</style></head><body>
<h1>llmesh A/B: {{.A}} vs {{.B}}</h1>
<p>Workload <code>{{.Workload}}</code>, {{.Repeats}} interleaved A/B pair(s).</p>
<h2>Comparison</h2>
<pre>{{.Comparison}}</pre>
{{range .Arms}}<h2>{{.Title}}</h2>
<iframe title="{{.Title}}" srcdoc="{{.Doc}}"></iframe>
{{end}}</body></html>
`))

type pageArm struct {
	Title string
	Doc   string
}

// HTML writes one self-contained HTML page: the comparison, then each arm's
// full report (with its charts) inline.
func HTML(w io.Writer, res *Result) error {
	var cmp bytes.Buffer
	if err := Table(&cmp, res); err != nil {
		return err
	}
	data := struct {
		A, B, Workload string
		Repeats        int
		Comparison     string
		Arms           []pageArm
	}{A: res.A, B: res.B, Workload: res.Workload, Repeats: res.Repeats, Comparison: cmp.String()}
	for _, r := range lastRuns(res) {
		var doc bytes.Buffer
		if err := report.HTML(&doc, r.Report); err != nil {
			return err
		}
		data.Arms = append(data.Arms, pageArm{Title: fmt.Sprintf("%s (run %d)", armLabel(res, r), r.Repeat+1), Doc: doc.String()})
	}
	return pageTemplate.Execute(w, data)
}

// lastRuns returns each arm's last run, A first.
func lastRuns(res *Result) []Run {
	var a, b *Run
	for i := range res.Runs {
		r := &res.Runs[i]
		switch r.Arm {
		case "A":
			a = r
		case "B":
			b = r
		}
	}
	var out []Run
	for _, r := range []*Run{a, b} {
		if r != nil && r.Report != nil {
			out = append(out, *r)
		}
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
