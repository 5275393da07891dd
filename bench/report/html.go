package report

import (
	"fmt"
	"html/template"
	"io"
	"math"

	"github.com/llmesh/llmesh/bench/result"
)

// CDFChart is a TTFT CDF chart: x on a log scale when the lines span more
// than two decades (an overloaded arm next to a calm one), else linear.
func CDFChart(title string, lines []Series) Chart {
	lo, hi := math.Inf(1), 0.0
	for _, s := range lines {
		for _, p := range s.XY {
			if p[0] > 0 {
				lo, hi = math.Min(lo, p[0]), math.Max(hi, p[0])
			}
		}
	}
	return Chart{Title: title, XLabel: "TTFT (ms)", YLabel: "fraction of requests", YMax: 1, LogX: hi > 100*lo, Series: lines}
}

// TimeSeries picks one value per timeline bucket.
func TimeSeries(rep *result.Report, v func(result.Bucket) (float64, bool)) [][2]float64 {
	var xy [][2]float64
	for _, b := range rep.Timeline {
		if y, ok := v(b); ok {
			xy = append(xy, [2]float64{b.StartS, y})
		}
	}
	return xy
}

// MeshQueueMeasured reports whether the run's responses carried llmesh's
// Server-Timing queue time, so Bucket.MeshQueued is a measurement.
func MeshQueueMeasured(rep *result.Report) bool {
	if rep.TimelineFormat < result.TimelineFormat {
		return false
	}
	for _, c := range rep.Classes {
		if c != nil && c.QueueMs != nil {
			return true
		}
	}
	return false
}

// Preempted is the number of preemptions over the run's timeline.
func Preempted(rep *result.Report) int {
	n := 0
	for _, b := range rep.Timeline {
		n += b.Preemptions
	}
	return n
}

func charts(rep *result.Report) []template.HTML {
	var cdf []Series
	for _, n := range ClassNames(rep) {
		var xy [][2]float64
		for _, pt := range rep.Classes[n].TTFTCDF {
			xy = append(xy, [2]float64{pt[0], pt[1]})
		}
		cdf = append(cdf, Series{Name: n, XY: xy})
	}
	done := func(b result.Bucket) bool { return b.Done > 0 }
	specs := []Chart{
		CDFChart("TTFT CDF per class", cdf),
		{Title: "Latency over time (requests finishing in each bucket)", XLabel: "time (s)", YLabel: "ms", Series: []Series{
			{Name: "TTFT p99", XY: TimeSeries(rep, func(b result.Bucket) (float64, bool) { return b.TTFTP99Ms, done(b) })},
			{Name: "E2E p50", XY: TimeSeries(rep, func(b result.Bucket) (float64, bool) { return b.E2EP50Ms, done(b) })},
		}},
		{Title: "Throughput over time", XLabel: "time (s)", YLabel: "output tokens/s", Series: []Series{
			{Name: "output tokens/s", XY: TimeSeries(rep, func(b result.Bucket) (float64, bool) { return b.OutputTokensPerS, true })},
		}},
	}
	depth := []Series{
		{Name: "in flight", XY: TimeSeries(rep, func(b result.Bucket) (float64, bool) { return float64(b.InFlight), true })},
		{Name: "waiting for first token", XY: TimeSeries(rep, func(b result.Bucket) (float64, bool) { return float64(b.Queued), true })},
	}
	if MeshQueueMeasured(rep) {
		depth = append(depth, Series{Name: "in llmesh's queue (Server-Timing)", XY: TimeSeries(rep, func(b result.Bucket) (float64, bool) { return float64(b.MeshQueued), true })})
	}
	specs = append(specs, Chart{Title: "In flight and queue depth", XLabel: "time (s)", YLabel: "requests", Series: depth})
	if rep.TimelineFormat >= result.TimelineFormat && Preempted(rep) > 0 {
		specs = append(specs, Chart{Title: "Preemptions over time (by the end of the preempted request)", XLabel: "time (s)", YLabel: "preemptions", Series: []Series{
			{Name: "preemptions", XY: TimeSeries(rep, func(b result.Bucket) (float64, bool) { return float64(b.Preemptions), true })},
		}})
	}
	if rep.GPU != nil {
		var sm, pw []Series
		for _, d := range rep.GPU.Devices {
			var u, p [][2]float64
			for _, s := range d.Series {
				u = append(u, [2]float64{s[0], s[1]})
				p = append(p, [2]float64{s[0], s[2]})
			}
			sm = append(sm, Series{Name: fmt.Sprintf("GPU %d SM %%", d.Index), XY: u})
			pw = append(pw, Series{Name: fmt.Sprintf("GPU %d W", d.Index), XY: p})
		}
		specs = append(specs, Chart{Title: "GPU SM utilization", XLabel: "time (s)", YLabel: "%", Series: sm},
			Chart{Title: "GPU power", XLabel: "time (s)", YLabel: "W", Series: pw})
	}
	out := make([]template.HTML, len(specs))
	for i, c := range specs {
		out[i] = c.HTML()
	}
	return out
}

var page = template.Must(template.New("report").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>llmesh bench: {{.Title}}</title>
<style>
body{font-family:system-ui,sans-serif;margin:2em;max-width:70em;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:.25em .6em;text-align:right}
th{background:#f3f3f3}td:first-child{text-align:left}.bad{color:#b00;font-weight:bold}.ok{color:#070}
.note{color:#666}
</style></head><body>
<h1>{{.Title}}</h1>
<p>{{.Rep.NumPrompts}} requests ({{.Rep.Warmup}} warm-up excluded) in {{printf "%.2f" .Rep.Duration}} s: {{.Rep.Completed}} ok, {{.Rep.Failed}} failed.
Offered {{printf "%.2f" .Rep.OfferedRPS}} req/s, achieved {{printf "%.2f" .Rep.AchievedRPS}} req/s, {{printf "%.1f" .Rep.OutputThroughput}} output tok/s, goodput {{printf "%.2f" .Rep.RequestGoodput}} req/s.</p>
<p class="{{if .Rep.Valid}}ok{{else}}bad{{end}}">Run {{.Validity}}</p>
{{with .Primary}}<p>{{.}}</p>
{{end}}<table><tr>{{range .Header}}<th>{{.}}</th>{{end}}</tr>
{{range .Rows}}<tr>{{range .}}<td>{{.}}</td>{{end}}</tr>
{{end}}</table>
<p class=note>Latencies in ms. Attainment is the share of requests meeting both SLOs; failed, rejected and dropped requests count as misses.</p>
<ul>{{range .Notes}}<li>{{.}}</li>{{end}}</ul>
{{range .Charts}}{{.}}
{{end}}{{if .Provenance}}<details id="provenance"><summary>provenance</summary><table>{{range .Provenance}}<tr><td>{{index . 0}}</td><td style="text-align:left"><code>{{index . 1}}</code></td></tr>{{end}}</table></details>
{{end}}</body></html>
`))

// HTML writes a self-contained page: tables and inline SVG charts, no
// external resources.
func HTML(w io.Writer, rep *result.Report) error {
	cs := charts(rep)
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
	notes = append(notes, prefixLines(rep)...)
	notes = append(notes, gpuLines(rep)...)
	var prov [][2]string
	if rep.Provenance != nil {
		prov = rep.Provenance.Rows()
	}
	return page.Execute(w, map[string]any{
		"Title": Title(rep), "Rep": rep, "Validity": Validity(rep), "Header": header,
		"Rows": rows, "Notes": notes, "Charts": cs, "Provenance": prov, "Primary": Primary(rep),
	})
}
