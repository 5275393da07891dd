package report

import (
	"fmt"
	"html/template"
	"math"
	"strconv"
	"strings"
)

// A chart is drawn here as inline SVG rather than through a plotting
// library: a report needs lines, axes with readable ticks and a legend, and
// a library that can also write PNG, PDF, EPS and LaTeX (with embedded fonts)
// costs the build far more than those few hundred lines (docs/bench.md).

// Series is one line of a Chart.
type Series struct {
	// Name is the legend entry; lines with equal names share one entry.
	Name string
	// Color is a CSS colour; empty picks Palette[i] for the i-th series.
	Color string
	// Dash is an SVG stroke-dasharray ("6 3"); empty draws a solid line.
	Dash string
	// XY are the points in drawing order.
	XY [][2]float64
}

// Chart is a line chart rendered as a self-contained <figure>: title,
// inline SVG (scales with the page through its viewBox) and an HTML legend
// below the plot, so no entry covers the data.
type Chart struct {
	Title, XLabel, YLabel string
	// LogX draws the x axis on a log10 scale (points at x ≤ 0 are left
	// out); for latency CDFs whose arms differ by orders of magnitude.
	LogX bool
	// YMax fixes the top of the y axis (1 for a CDF); 0 fits the data.
	YMax   float64
	Series []Series
}

// Palette are the line colours, distinguishable in print and for the
// common colour-vision deficiencies (Okabe–Ito order).
var Palette = []string{"#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#000000", "#f0e442"}

// Drawing area in SVG user units; the page scales it to its width.
const (
	chartW, chartH                       = 960.0, 380.0
	padL, padR, padT, padB               = 72.0, 20.0, 16.0, 56.0
	plotW, plotH                         = chartW - padL - padR, chartH - padT - padB
	tickLen, axisFont, labelFont, stroke = 5.0, 13.0, 14.0, 2.0
)

// HTML renders the chart; a chart without points is a short note.
func (c Chart) HTML() template.HTML {
	var lines []Series
	xmin, xmax, ymin, ymax := math.Inf(1), math.Inf(-1), 0.0, math.Inf(-1)
	for i, s := range c.Series {
		if s.Color == "" {
			s.Color = Palette[i%len(Palette)]
		}
		var xy [][2]float64
		for _, p := range s.XY {
			if math.IsNaN(p[0]) || math.IsNaN(p[1]) || math.IsInf(p[0], 0) || math.IsInf(p[1], 0) || (c.LogX && p[0] <= 0) {
				continue
			}
			xy = append(xy, p)
			xmin, xmax = math.Min(xmin, p[0]), math.Max(xmax, p[0])
			ymin, ymax = math.Min(ymin, p[1]), math.Max(ymax, p[1])
		}
		if len(xy) > 0 {
			s.XY = xy
			lines = append(lines, s)
		}
	}
	var b strings.Builder
	b.WriteString(`<figure class="chart" style="margin:1rem 0 1.6rem;max-width:960px">`)
	fmt.Fprintf(&b, `<figcaption style="font-weight:600;margin-bottom:.3rem">%s</figcaption>`, template.HTMLEscapeString(c.Title))
	if len(lines) == 0 {
		b.WriteString(`<p class="note">no data</p></figure>`)
		return template.HTML(b.String())
	}
	if c.YMax > 0 {
		ymax = c.YMax
	}
	xs := newAxis(xmin, xmax, c.LogX, false)
	ys := newAxis(ymin, ymax, false, c.YMax > 0)
	px := func(x float64) float64 { return padL + plotW*xs.frac(x) }
	py := func(y float64) float64 { return padT + plotH*(1-ys.frac(y)) }

	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %g %g" width="100%%" role="img" aria-label="%s" style="display:block;font-family:system-ui,sans-serif">`,
		chartW, chartH, template.HTMLEscapeString(c.Title))
	fmt.Fprintf(&b, `<rect x="%g" y="%g" width="%g" height="%g" fill="#fff" stroke="#8c959f"/>`, padL, padT, plotW, plotH)
	for _, t := range ys.ticks {
		y := py(t)
		fmt.Fprintf(&b, `<line x1="%g" y1="%s" x2="%g" y2="%s" stroke="#d8dee4"/>`, padL, f1(y), padL+plotW, f1(y))
		fmt.Fprintf(&b, `<text x="%g" y="%s" font-size="%g" text-anchor="end" dominant-baseline="middle" fill="#424a53">%s</text>`,
			padL-tickLen-3, f1(y), axisFont, ys.label(t))
	}
	for _, t := range xs.ticks {
		x := px(t)
		fmt.Fprintf(&b, `<line x1="%s" y1="%g" x2="%s" y2="%g" stroke="#d8dee4"/>`, f1(x), padT, f1(x), padT+plotH)
		fmt.Fprintf(&b, `<text x="%s" y="%g" font-size="%g" text-anchor="middle" fill="#424a53">%s</text>`,
			f1(x), padT+plotH+tickLen+axisFont, axisFont, xs.label(t))
	}
	fmt.Fprintf(&b, `<text x="%g" y="%g" font-size="%g" text-anchor="middle" fill="#1f2328">%s</text>`,
		padL+plotW/2, chartH-10, labelFont, template.HTMLEscapeString(c.XLabel))
	fmt.Fprintf(&b, `<text x="16" y="%g" font-size="%g" text-anchor="middle" fill="#1f2328" transform="rotate(-90 16 %g)">%s</text>`,
		padT+plotH/2, labelFont, padT+plotH/2, template.HTMLEscapeString(c.YLabel))
	for _, s := range lines {
		var pts strings.Builder
		for i, p := range s.XY {
			if i > 0 {
				pts.WriteByte(' ')
			}
			pts.WriteString(f1(px(p[0])) + "," + f1(py(p[1])))
		}
		dash := ""
		if s.Dash != "" {
			dash = fmt.Sprintf(` stroke-dasharray="%s"`, template.HTMLEscapeString(s.Dash))
		}
		if len(s.XY) == 1 {
			fmt.Fprintf(&b, `<circle cx="%s" cy="%s" r="3" fill="%s"><title>%s</title></circle>`,
				f1(px(s.XY[0][0])), f1(py(s.XY[0][1])), template.HTMLEscapeString(s.Color), template.HTMLEscapeString(s.Name))
			continue
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="%g"%s stroke-linejoin="round" points="%s"><title>%s</title></polyline>`,
			template.HTMLEscapeString(s.Color), stroke, dash, pts.String(), template.HTMLEscapeString(s.Name))
	}
	b.WriteString(`</svg>`)
	b.WriteString(`<ul class="legend" style="list-style:none;display:flex;flex-wrap:wrap;gap:.3rem 1.2rem;padding:0;margin:.3rem 0 0 72px;font-size:.9rem">`)
	seen := map[string]bool{}
	for _, s := range lines {
		if s.Name == "" || seen[s.Name] {
			continue
		}
		seen[s.Name] = true
		dash := ""
		if s.Dash != "" {
			dash = fmt.Sprintf(` stroke-dasharray="%s"`, template.HTMLEscapeString(s.Dash))
		}
		fmt.Fprintf(&b, `<li><svg width="28" height="10" style="vertical-align:middle"><line x1="0" y1="5" x2="28" y2="5" stroke="%s" stroke-width="3"%s/></svg> %s</li>`,
			template.HTMLEscapeString(s.Color), dash, template.HTMLEscapeString(s.Name))
	}
	b.WriteString(`</ul></figure>`)
	return template.HTML(b.String())
}

// f1 formats a coordinate with one decimal, enough at this size and stable
// for golden files.
func f1(v float64) string { return strconv.FormatFloat(math.Round(v*10)/10, 'f', -1, 64) }

// axis maps data to [0, 1] and holds its ticks.
type axis struct {
	lo, hi float64
	log    bool
	step   float64 // linear tick step, for labels
	ticks  []float64
}

func newAxis(lo, hi float64, log, fixedHi bool) axis {
	if log {
		kLo, kHi := int(math.Floor(math.Log10(lo))), int(math.Ceil(math.Log10(hi)))
		if kHi <= kLo {
			kHi = kLo + 1
		}
		a := axis{log: true, lo: math.Pow10(kLo), hi: math.Pow10(kHi)}
		mults := []float64{1, 2, 5}
		if kHi-kLo > 4 {
			mults = []float64{1}
		}
		every := max(1, (kHi-kLo+9)/10) // at most about ten decade ticks
		for k := kLo; k <= kHi; k += every {
			for _, m := range mults {
				if k < kHi || m == 1 {
					a.ticks = append(a.ticks, m*math.Pow10(k))
				}
			}
		}
		return a
	}
	if hi <= lo {
		hi = lo + 1
	}
	step := niceStep((hi - lo) / 6)
	a := axis{lo: math.Floor(lo/step) * step, hi: hi, step: step}
	if !fixedHi {
		a.hi = math.Ceil(hi/step) * step
	}
	// Ticks by index: adding step to a large value can leave it unchanged.
	for i := 0; i <= 20; i++ {
		t := a.lo + float64(i)*step
		if t > a.hi+step/1e6 {
			break
		}
		a.ticks = append(a.ticks, math.Round(t/step)*step)
	}
	return a
}

func (a axis) frac(v float64) float64 {
	var f float64
	if a.log {
		f = math.Log10(v/a.lo) / math.Log10(a.hi/a.lo)
	} else {
		f = (v - a.lo) / (a.hi - a.lo)
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0.5 // a range too narrow for float64 at this magnitude
	}
	return min(1, max(0, f))
}

// label formats a tick: a log axis value by value, a linear one in one
// unit for the whole axis (k or M from 10,000 up).
func (a axis) label(v float64) string {
	if a.log || a.step >= 1 {
		scale := math.Abs(v)
		if !a.log {
			scale = math.Max(math.Abs(a.lo), math.Abs(a.hi))
		}
		switch {
		case v == 0:
			return "0"
		case scale >= 1e6:
			return strconv.FormatFloat(v/1e6, 'f', -1, 64) + "M"
		case scale >= 1e4:
			return strconv.FormatFloat(v/1e3, 'f', -1, 64) + "k"
		}
		return strconv.FormatFloat(v, 'g', 6, 64)
	}
	dec := int(math.Max(0, -math.Floor(math.Log10(a.step))))
	return strconv.FormatFloat(v, 'f', dec, 64)
}

// niceStep rounds a raw step up to 1, 2 or 5 × 10^k.
func niceStep(raw float64) float64 {
	if raw <= 0 || math.IsNaN(raw) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	switch f := raw / p; {
	case f <= 1:
		return p
	case f <= 2:
		return 2 * p
	case f <= 5:
		return 5 * p
	}
	return 10 * p
}
