package report

import (
	"bytes"
	"fmt"
	"html/template"
	"io"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/llmesh/llmesh/bench/result"
)

// series is one named line of a chart.
type series struct {
	name string
	xy   plotter.XYs
}

// chart renders lines as an inline SVG; fonts are referenced, not embedded,
// to keep the page small.
func chart(title, xLabel, yLabel string, lines []series) (template.HTML, error) {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xLabel
	p.Y.Label.Text = yLabel
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	any := false
	for i, s := range lines {
		if len(s.xy) == 0 {
			continue
		}
		l, err := plotter.NewLine(s.xy)
		if err != nil {
			return "", fmt.Errorf("chart %q: %w", title, err)
		}
		l.Color = plotutil.Color(i)
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(s.name, l)
		any = true
	}
	if !any {
		return template.HTML("<p class=note>no data for " + template.HTMLEscapeString(title) + "</p>"), nil
	}
	c := vgsvg.NewWith(vgsvg.UseWH(16*vg.Centimeter, 8*vg.Centimeter), vgsvg.EmbedFonts(false))
	p.Draw(draw.New(c))
	var buf bytes.Buffer
	if _, err := c.WriteTo(&buf); err != nil {
		return "", err
	}
	// Drop the XML prolog so the SVG can sit inside HTML.
	b := buf.Bytes()
	if i := bytes.Index(b, []byte("<svg")); i > 0 {
		b = b[i:]
	}
	return template.HTML(b), nil
}

func charts(rep *result.Report) ([]template.HTML, error) {
	var cdf []series
	for _, n := range ClassNames(rep) {
		var xy plotter.XYs
		for _, pt := range rep.Classes[n].TTFTCDF {
			xy = append(xy, plotter.XY{X: pt[0], Y: pt[1]})
		}
		cdf = append(cdf, series{n, xy})
	}
	var lat, tput, depth []series
	var ttft, e2e, tok, inflight, queued plotter.XYs
	for _, b := range rep.Timeline {
		if b.Done > 0 {
			ttft = append(ttft, plotter.XY{X: b.StartS, Y: b.TTFTP99Ms})
			e2e = append(e2e, plotter.XY{X: b.StartS, Y: b.E2EP50Ms})
		}
		tok = append(tok, plotter.XY{X: b.StartS, Y: b.OutputTokensPerS})
		inflight = append(inflight, plotter.XY{X: b.StartS, Y: float64(b.InFlight)})
		queued = append(queued, plotter.XY{X: b.StartS, Y: float64(b.Queued)})
	}
	lat = []series{{"TTFT p99", ttft}, {"E2E p50", e2e}}
	tput = []series{{"output tokens/s", tok}}
	depth = []series{{"in flight", inflight}, {"waiting for first token", queued}}
	specs := []struct {
		title, x, y string
		s           []series
	}{
		{"TTFT CDF per class", "TTFT (ms)", "fraction of requests", cdf},
		{"Latency over time", "time (s)", "ms", lat},
		{"Throughput over time", "time (s)", "tokens/s", tput},
		{"In flight and queue depth", "time (s)", "requests", depth},
	}
	if rep.GPU != nil {
		var sm, pw []series
		for _, d := range rep.GPU.Devices {
			var u, p plotter.XYs
			for _, s := range d.Series {
				u = append(u, plotter.XY{X: s[0], Y: s[1]})
				p = append(p, plotter.XY{X: s[0], Y: s[2]})
			}
			sm = append(sm, series{fmt.Sprintf("GPU %d SM %%", d.Index), u})
			pw = append(pw, series{fmt.Sprintf("GPU %d W", d.Index), p})
		}
		specs = append(specs, struct {
			title, x, y string
			s           []series
		}{"GPU SM utilization", "time (s)", "%", sm}, struct {
			title, x, y string
			s           []series
		}{"GPU power", "time (s)", "W", pw})
	}
	var out []template.HTML
	for _, s := range specs {
		h, err := chart(s.title, s.x, s.y, s.s)
		if err != nil {
			return nil, err
		}
		out = append(out, h)
	}
	return out, nil
}

var page = template.Must(template.New("report").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>llmesh bench: {{.Title}}</title>
<style>
body{font-family:system-ui,sans-serif;margin:2em;max-width:70em;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:.25em .6em;text-align:right}
th{background:#f3f3f3}td:first-child{text-align:left}.bad{color:#b00;font-weight:bold}.ok{color:#070}
.note{color:#666}svg{display:block;margin:1em 0}
</style></head><body>
<h1>{{.Title}}</h1>
<p>{{.Rep.NumPrompts}} requests ({{.Rep.Warmup}} warm-up excluded) in {{printf "%.2f" .Rep.Duration}} s: {{.Rep.Completed}} ok, {{.Rep.Failed}} failed.
Offered {{printf "%.2f" .Rep.OfferedRPS}} req/s, achieved {{printf "%.2f" .Rep.AchievedRPS}} req/s, {{printf "%.1f" .Rep.OutputThroughput}} output tok/s, goodput {{printf "%.2f" .Rep.RequestGoodput}} req/s.</p>
<p class="{{if .Rep.Valid}}ok{{else}}bad{{end}}">Run {{.Validity}}</p>
<table><tr>{{range .Header}}<th>{{.}}</th>{{end}}</tr>
{{range .Rows}}<tr>{{range .}}<td>{{.}}</td>{{end}}</tr>
{{end}}</table>
<p class=note>Latencies in ms. Attainment is the share of requests meeting both SLOs; failed, rejected and dropped requests count as misses.</p>
<ul>{{range .Notes}}<li>{{.}}</li>{{end}}</ul>
{{range .Charts}}{{.}}
{{end}}
</body></html>
`))

// HTML writes a self-contained page: tables and inline SVG charts, no
// external resources.
func HTML(w io.Writer, rep *result.Report) error {
	cs, err := charts(rep)
	if err != nil {
		return err
	}
	var rows [][]string
	var notes []string
	for _, n := range ClassNames(rep) {
		rows = append(rows, row(n, rep.Classes[n], false))
		notes = append(notes, n+" violations: "+violations(rep.Classes[n]))
		if es := earlyStopping(rep.Classes[n]); es != "" {
			notes = append(notes, n+" early stopping (99% confidence): "+es)
		}
		for _, l := range liveLines(rep.Classes[n], true) {
			notes = append(notes, n+" "+l)
		}
	}
	rows = append(rows, row("all", rep.Overall, true))
	if rep.Engine != nil {
		notes = append(notes, fmt.Sprintf("engine agreement: client − engine TTFT p50 %s ms, p99 %s ms over %d requests (time before the engine saw the request, including queueing in a gateway or filter in front of it)", trim(rep.Engine.DeltaMs.P50), trim(rep.Engine.DeltaMs.P99), rep.Engine.N))
	}
	notes = append(notes, gpuLines(rep)...)
	return page.Execute(w, map[string]any{
		"Title": Title(rep), "Rep": rep, "Validity": Validity(rep), "Header": header,
		"Rows": rows, "Notes": notes, "Charts": cs,
	})
}
