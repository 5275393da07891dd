package ab

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strings"

	"github.com/llmesh/llmesh/bench/result"
	"github.com/llmesh/llmesh/bench/workload"
)

// Delta is one metric of one class, B relative to A.
type Delta struct {
	Metric string `json:"metric"`
	// HigherIsBetter says which direction is an improvement.
	HigherIsBetter bool    `json:"higher_is_better"`
	A              float64 `json:"a"`
	B              float64 `json:"b"`
	// Diff is B − A; DiffPct is that relative to A (0 when A is 0).
	Diff    float64 `json:"diff"`
	DiffPct float64 `json:"diff_pct"`
	// CILow and CIHigh bound Diff with 95% confidence (percentile
	// bootstrap over requests pooled across repeats).
	CILow  float64 `json:"ci_low"`
	CIHigh float64 `json:"ci_high"`
	// Verdict is "better", "worse" or "no significant difference" (the
	// interval contains 0).
	Verdict string `json:"verdict"`
}

// Verdicts.
const (
	Better = "better"
	Worse  = "worse"
	NoDiff = "no significant difference"
)

// armSamples pools one arm's measured requests by class.
type armSamples struct {
	ttft, tpot map[string][]float64 // ms, successful requests
	met        map[string][]bool    // every measured request
	seconds    float64              // summed measured durations
}

func newArmSamples() *armSamples {
	return &armSamples{ttft: map[string][]float64{}, tpot: map[string][]float64{}, met: map[string][]bool{}}
}

func (a *armSamples) add(recs []result.Record, rep *result.Report, w *workload.Workload) {
	slo := map[string]workload.Class{}
	for _, c := range w.Classes {
		slo[c.Name] = c
	}
	a.seconds += rep.Duration
	for i := range recs {
		r := &recs[i]
		if r.Warmup || r.Status == result.StatusCancelled {
			continue
		}
		ok := r.Status == result.StatusOK
		c := slo[r.Class]
		ttft, hasTTFT := r.TTFT()
		tpot, hasTPOT := r.TPOT()
		if ok && hasTTFT {
			a.ttft[r.Class] = append(a.ttft[r.Class], float64(ttft)/1e6)
		}
		if ok && hasTPOT {
			a.tpot[r.Class] = append(a.tpot[r.Class], float64(tpot)/1e6)
		}
		met := ok && !(c.TTFT > 0 && (!hasTTFT || ttft > c.TTFT)) && !(c.TPOT > 0 && hasTPOT && tpot > c.TPOT)
		a.met[r.Class] = append(a.met[r.Class], met)
	}
}

// statistic computes one metric from a (resampled) sample.
type statistic struct {
	name           string
	higherIsBetter bool
	values         func(a *armSamples, class string) []float64
	compute        func(xs []float64, a *armSamples) float64
}

func quantile(q float64) func([]float64, *armSamples) float64 {
	return func(xs []float64, _ *armSamples) float64 {
		if len(xs) == 0 {
			return math.NaN()
		}
		s := append([]float64(nil), xs...)
		sort.Float64s(s)
		i := int(math.Ceil(q*float64(len(s)))) - 1
		return s[max(0, min(i, len(s)-1))]
	}
}

func boolsAsFloats(bs []bool) []float64 {
	out := make([]float64, len(bs))
	for i, b := range bs {
		if b {
			out[i] = 1
		}
	}
	return out
}

func mean(xs []float64, _ *armSamples) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

var statistics = []statistic{
	{"ttft_p50_ms", false, func(a *armSamples, c string) []float64 { return a.ttft[c] }, quantile(0.50)},
	{"ttft_p99_ms", false, func(a *armSamples, c string) []float64 { return a.ttft[c] }, quantile(0.99)},
	{"tpot_p50_ms", false, func(a *armSamples, c string) []float64 { return a.tpot[c] }, quantile(0.50)},
	{"tpot_p99_ms", false, func(a *armSamples, c string) []float64 { return a.tpot[c] }, quantile(0.99)},
	{"slo_attainment", true, func(a *armSamples, c string) []float64 { return boolsAsFloats(a.met[c]) }, mean},
	{"goodput_rps", true, func(a *armSamples, c string) []float64 { return boolsAsFloats(a.met[c]) }, func(xs []float64, a *armSamples) float64 {
		if a.seconds <= 0 {
			return math.NaN()
		}
		var s float64
		for _, x := range xs {
			s += x
		}
		return s / a.seconds
	}},
}

// MinEffect is the smallest relative difference (of the larger of A and B)
// called better or worse. Some variation is not resampled — a run's
// duration includes the drain of its last requests, which moves goodput a
// little — so tiny differences with a degenerate interval are not
// findings.
const MinEffect = 0.01

// maxWork bounds resamples × sample size per statistic so large runs stay
// fast; fewer resamples widen the interval estimate's noise, not its
// coverage.
const maxWork = 20_000_000

func deltas(a, b *armSamples, w *workload.Workload, resamples int) map[string][]Delta {
	out := map[string][]Delta{}
	rng := rand.New(rand.NewPCG(uint64(w.Spec.Seed), 0xab))
	for _, c := range w.Classes {
		for _, st := range statistics {
			xa, xb := st.values(a, c.Name), st.values(b, c.Name)
			if len(xa) == 0 || len(xb) == 0 {
				continue
			}
			d := Delta{Metric: st.name, HigherIsBetter: st.higherIsBetter, A: st.compute(xa, a), B: st.compute(xb, b)}
			d.Diff = d.B - d.A
			if d.A != 0 {
				d.DiffPct = 100 * d.Diff / d.A
			}
			n := min(resamples, max(200, maxWork/(len(xa)+len(xb))))
			diffs := make([]float64, 0, n)
			ra, rb := make([]float64, len(xa)), make([]float64, len(xb))
			for k := 0; k < n; k++ {
				for i := range ra {
					ra[i] = xa[rng.IntN(len(xa))]
				}
				for i := range rb {
					rb[i] = xb[rng.IntN(len(xb))]
				}
				diffs = append(diffs, st.compute(rb, b)-st.compute(ra, a))
			}
			sort.Float64s(diffs)
			d.CILow = diffs[int(0.025*float64(n))]
			d.CIHigh = diffs[min(n-1, int(math.Ceil(0.975*float64(n)))-1)]
			d.Verdict = NoDiff
			if math.Abs(d.Diff) < MinEffect*max(math.Abs(d.A), math.Abs(d.B)) {
				out[c.Name] = append(out[c.Name], d)
				continue
			}
			improved := (d.CILow > 0 && st.higherIsBetter) || (d.CIHigh < 0 && !st.higherIsBetter)
			regressed := (d.CIHigh < 0 && st.higherIsBetter) || (d.CILow > 0 && !st.higherIsBetter)
			switch {
			case improved:
				d.Verdict = Better
			case regressed:
				d.Verdict = Worse
			}
			out[c.Name] = append(out[c.Name], d)
		}
	}
	return out
}

// verdict summarizes the primary metrics (per class: TTFT p99, TPOT p99,
// SLO attainment, goodput).
func verdict(r *Result) string {
	primary := map[string]bool{"ttft_p99_ms": true, "tpot_p99_ms": true, "slo_attainment": true, "goodput_rps": true}
	var better, worse []string
	for class, ds := range r.Classes {
		for _, d := range ds {
			if !primary[d.Metric] {
				continue
			}
			switch d.Verdict {
			case Better:
				better = append(better, class+" "+d.Metric)
			case Worse:
				worse = append(worse, class+" "+d.Metric)
			}
		}
	}
	sort.Strings(better)
	sort.Strings(worse)
	prefix := fmt.Sprintf("verdict: B (%s) vs A (%s): ", r.B, r.A)
	switch {
	case len(better) > 0 && len(worse) == 0:
		return prefix + "better (" + strings.Join(better, ", ") + ")"
	case len(worse) > 0 && len(better) == 0:
		return prefix + "worse (" + strings.Join(worse, ", ") + ")"
	case len(worse) > 0:
		return prefix + "mixed: better " + strings.Join(better, ", ") + "; worse " + strings.Join(worse, ", ")
	}
	return prefix + NoDiff
}
