package compare

import (
	"fmt"
	"strconv"
	"strings"
)

// Gate is a relative threshold such as "interactive.ttft_p99_ms>+5%": it is
// breached when the metric's change from A to B is significant in the
// gate's direction and its point estimate crosses the threshold.
type Gate struct {
	Metric  string
	Above   bool    // '>' (rise is bad) or '<' (fall is bad)
	Percent float64 // signed, e.g. +5 or -2
}

func (g Gate) String() string {
	op := "<"
	if g.Above {
		op = ">"
	}
	return fmt.Sprintf("%s%s%+g%%", g.Metric, op, g.Percent)
}

// ParseGate reads "class.metric>+N%" or "class.metric<-N%".
func ParseGate(s string) (Gate, error) {
	i := strings.IndexAny(s, "<>")
	if i < 0 {
		return Gate{}, fmt.Errorf("--fail-on %q: want METRIC>+N%% or METRIC<-N%%", s)
	}
	g := Gate{Metric: strings.TrimSpace(s[:i]), Above: s[i] == '>'}
	if g.Metric == "" || !strings.Contains(g.Metric, ".") {
		return Gate{}, fmt.Errorf("--fail-on %q: metric %q must be CLASS.METRIC", s, g.Metric)
	}
	num := strings.TrimSpace(s[i+1:])
	if !strings.HasSuffix(num, "%") {
		return Gate{}, fmt.Errorf("--fail-on %q: threshold %q must end in %%", s, num)
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(num, "%")), 64)
	if err != nil || v != v || v > 1e6 || v < -1e6 {
		return Gate{}, fmt.Errorf("--fail-on %q: threshold %q is not a percentage", s, num)
	}
	g.Percent = v
	return g, nil
}

// GateResult is one gate's outcome.
type GateResult struct {
	Gate     string `json:"gate"`
	Breached bool   `json:"breached"`
	Reason   string `json:"reason"`
}

// Check applies gates to a result. A gate naming a metric the result lacks is
// an error: a gate that silently never fires would be a false pass.
func Check(r *Result, gates []Gate) ([]GateResult, error) {
	by := map[string]Judged{}
	for _, j := range r.Metrics {
		by[j.Name] = j
	}
	out := make([]GateResult, 0, len(gates))
	for _, g := range gates {
		j, ok := by[g.Metric]
		if !ok {
			return nil, fmt.Errorf("--fail-on %s: no metric %q in the comparison", g, g.Metric)
		}
		gr := GateResult{Gate: g.String()}
		rel := j.RelDelta * 100
		crossed := rel > g.Percent
		significantUp := j.PAdjusted < r.Alpha && j.Delta > 0 && j.Status != Inconclusive
		if !g.Above {
			crossed = rel < g.Percent
			significantUp = j.PAdjusted < r.Alpha && j.Delta < 0 && j.Status != Inconclusive
		}
		switch {
		case j.MeanA == 0:
			gr.Reason = "arm A mean is 0: no relative change"
		case crossed && significantUp:
			gr.Breached = true
			gr.Reason = fmt.Sprintf("%+.2f%% (p=%.3g)", rel, j.PAdjusted)
		case crossed:
			gr.Reason = fmt.Sprintf("%+.2f%% but not significant (p=%.3g)", rel, j.PAdjusted)
		default:
			gr.Reason = fmt.Sprintf("%+.2f%%", rel)
		}
		out = append(out, gr)
	}
	return out, nil
}
