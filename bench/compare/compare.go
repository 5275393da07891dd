package compare

import (
	"errors"
	"fmt"
	"math"
	"sort"
)

// Status is the judgement of one metric, and Verdict that of a comparison.
type Status string

const (
	Better       Status = "better"
	Worse        Status = "worse"
	Mixed        Status = "mixed"
	NoDifference Status = "no_difference"
	Inconclusive Status = "inconclusive"
)

// Metric is one measurement taken on both arms for each independent unit:
// A[i] and B[i] come from the same seed or repeat.
type Metric struct {
	Name        string    // "class.metric", e.g. "interactive.ttft_p99_ms"
	LowerBetter bool      // latencies: true; goodput, attainment: false
	Primary     bool      // the class's declared primary metric
	A, B        []float64 // per unit, paired
}

// Judged is a Metric's paired comparison.
type Judged struct {
	Name      string  `json:"name"`
	Primary   bool    `json:"primary"`
	Units     int     `json:"units"`
	MeanA     float64 `json:"mean_a"`
	MeanB     float64 `json:"mean_b"`
	Delta     float64 `json:"delta"`               // mean of B[i]-A[i]
	RelDelta  float64 `json:"rel_delta,omitempty"` // Delta / MeanA, when MeanA != 0
	CILow     float64 `json:"ci_low"`
	CIHigh    float64 `json:"ci_high"`
	P         float64 `json:"p"`          // two-sided, uncorrected
	PAdjusted float64 `json:"p_adjusted"` // Holm over the non-primary family; = P for primaries
	MDE       float64 `json:"mde"`        // smallest |Delta| detectable at 80% power; 0 with one unit (no interval)
	Status    Status  `json:"status"`
	Reason    string  `json:"reason,omitempty"`
}

// Result is a whole comparison.
type Result struct {
	Alpha   float64  `json:"alpha"`
	Verdict Status   `json:"verdict"`
	Metrics []Judged `json:"metrics"`
}

// Judge compares every metric at level alpha (e.g. 0.05). It fails when a
// metric's arms have different lengths, so that unpaired data never reaches
// a verdict.
func Judge(ms []Metric, alpha float64) (*Result, error) {
	if !(alpha > 0 && alpha < 1) {
		return nil, fmt.Errorf("alpha: %v must be in (0, 1)", alpha)
	}
	var errs []error
	for i, m := range ms {
		if m.Name == "" {
			errs = append(errs, fmt.Errorf("metrics[%d].name: empty", i))
		}
		if len(m.A) != len(m.B) {
			errs = append(errs, fmt.Errorf("metrics[%d] (%s): %d units on arm A, %d on arm B; runs must be paired", i, m.Name, len(m.A), len(m.B)))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	res := &Result{Alpha: alpha, Metrics: make([]Judged, len(ms))}
	var family []int
	for i, m := range ms {
		res.Metrics[i] = paired(m, alpha)
		if !m.Primary {
			family = append(family, i)
		}
	}
	holm(res.Metrics, family)
	for i, m := range ms {
		j := &res.Metrics[i]
		if j.Status != "" {
			continue
		}
		j.Status = NoDifference
		if j.PAdjusted < alpha {
			improved := (j.Delta < 0) == m.LowerBetter
			j.Status = Worse
			if improved {
				j.Status = Better
			}
		}
	}
	res.Verdict = verdict(res.Metrics)
	return res, nil
}

// paired computes the interval and p-value of one metric; Status is left
// empty unless the data settle it without a test.
func paired(m Metric, alpha float64) Judged {
	n := len(m.A)
	j := Judged{Name: m.Name, Primary: m.Primary, Units: n, P: 1, PAdjusted: 1}
	if n == 0 {
		j.Status, j.Reason = Inconclusive, "no paired units"
		return j
	}
	d := make([]float64, n)
	var sa, sb, sd float64
	for i := range m.A {
		d[i] = m.B[i] - m.A[i]
		sa += m.A[i]
		sb += m.B[i]
		sd += d[i]
	}
	fn := float64(n)
	j.MeanA, j.MeanB, j.Delta = sa/fn, sb/fn, sd/fn
	if j.MeanA != 0 {
		j.RelDelta = j.Delta / j.MeanA
	}
	if n < 2 {
		// No interval: CILow, CIHigh and MDE stay 0 (JSON has no
		// infinity), and the status and reason say why.
		j.Status, j.Reason = Inconclusive, "one unit: no interval; run more seeds or repeats"
		return j
	}
	var ss float64
	for _, x := range d {
		ss += (x - j.Delta) * (x - j.Delta)
	}
	se := math.Sqrt(ss/(fn-1)) / math.Sqrt(fn)
	df := fn - 1
	// Spread at the level of float rounding is no spread: a constant shift
	// must not become a zero-width significant interval.
	if math.IsNaN(se) || se <= 1e-9*math.Max(math.Abs(j.Delta), math.Abs(j.MeanA)) {
		j.CILow, j.CIHigh = j.Delta, j.Delta
		if j.Delta == 0 {
			j.Status, j.Reason = NoDifference, "identical on every unit"
		} else {
			j.Status, j.Reason = Inconclusive, "degenerate interval: the difference has no spread across units"
		}
		return j
	}
	tc := tQuantile(1-alpha/2, df)
	j.CILow, j.CIHigh = j.Delta-tc*se, j.Delta+tc*se
	j.P = 2 * tCDF(-math.Abs(j.Delta/se), df)
	j.PAdjusted = j.P
	j.MDE = (tc + tQuantile(0.8, df)) * se
	return j
}

// holm replaces PAdjusted of the metrics at idx with Holm's step-down
// adjustment over that family.
func holm(js []Judged, idx []int) {
	var fam []int
	for _, i := range idx {
		if js[i].Status == "" {
			fam = append(fam, i)
		}
	}
	sort.SliceStable(fam, func(a, b int) bool { return js[fam[a]].P < js[fam[b]].P })
	m := float64(len(fam))
	running := 0.0
	for k, i := range fam {
		adj := math.Min(1, (m-float64(k))*js[i].P)
		running = math.Max(running, adj)
		js[i].PAdjusted = running
	}
}

// verdict aggregates the primaries, or every metric when none is primary.
func verdict(js []Judged) Status {
	var sel []Judged
	for _, j := range js {
		if j.Primary {
			sel = append(sel, j)
		}
	}
	if len(sel) == 0 {
		sel = js
	}
	if len(sel) == 0 {
		return Inconclusive
	}
	var better, worse, inconclusive bool
	for _, j := range sel {
		switch j.Status {
		case Better:
			better = true
		case Worse:
			worse = true
		case Inconclusive:
			inconclusive = true
		}
	}
	switch {
	case better && worse:
		return Mixed
	case worse:
		return Worse
	case better:
		return Better
	case inconclusive:
		return Inconclusive
	}
	return NoDifference
}
