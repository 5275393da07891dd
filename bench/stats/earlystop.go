package stats

import (
	"math"

	"github.com/llmesh/llmesh/bench/result"
)

// confidence is MLPerf's early-stopping confidence level.
const confidence = 0.99

// earlyStop applies MLPerf's early-stopping criterion to the claim "the p
// quantile is at most X": with n samples, find the largest number t of
// samples allowed above X such that P(Binomial(n, 1−p) ≤ t) ≤ 1−confidence.
// If such a t exists the claim is supported, and the bound is the latency
// with t samples above it (≥ the plain empirical percentile). With too few
// samples no t exists (for p = 0.99 that needs n ≥ 459) and the claim is
// marked invalid.
func earlyStop(metricName string, p float64, m *metric) result.EarlyStop {
	es := result.EarlyStop{Metric: metricName, Percentile: p * 100, N: m.n, MinSamples: minSamples(p)}
	if m.n < es.MinSamples {
		return es
	}
	t := maxOverLatency(m.n, p)
	if t < 0 {
		return es
	}
	es.Valid = true
	es.BoundMs = m.q(100 * float64(m.n-t) / float64(m.n))
	return es
}

// minSamples is the smallest n with p^n ≤ 1−confidence (zero samples above
// the bound already convincing).
func minSamples(p float64) int {
	return int(math.Ceil(math.Log(1-confidence) / math.Log(p)))
}

// maxOverLatency returns the largest t with P(Binomial(n, 1−p) ≤ t) ≤
// 1−confidence, or −1. It sums the binomial pmf in log space so large n do
// not underflow.
func maxOverLatency(n int, p float64) int {
	q := 1 - p
	logAlpha := math.Log(1 - confidence)
	logPMF := float64(n) * math.Log(p) // k = 0
	logCDF := logPMF
	if logCDF > logAlpha {
		return -1
	}
	t := 0
	for k := 0; k < n; k++ {
		logPMF += math.Log(float64(n-k)) - math.Log(float64(k+1)) + math.Log(q) - math.Log(p)
		logCDF = logAdd(logCDF, logPMF)
		if logCDF > logAlpha {
			break
		}
		t = k + 1
	}
	return t
}

func logAdd(a, b float64) float64 {
	if a < b {
		a, b = b, a
	}
	return a + math.Log1p(math.Exp(b-a))
}
