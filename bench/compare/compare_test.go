package compare

import (
	"encoding/json"
	"math"
	"math/rand"
	"strings"
	"testing"
)

func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol }

func TestTQuantileMatchesTables(t *testing.T) {
	for _, c := range []struct{ p, df, want float64 }{
		{0.975, 9, 2.262157}, {0.975, 1, 12.706205}, {0.975, 30, 2.042272}, {0.8, 9, 0.8834}, {0.5, 4, 0},
	} {
		if got := tQuantile(c.p, c.df); !near(got, c.want, 1e-3) {
			t.Errorf("tQuantile(%v, %v) = %v, want %v", c.p, c.df, got, c.want)
		}
	}
}

func TestPairedIntervalFromUnits(t *testing.T) {
	// Differences 1..5: mean 3, sd sqrt(2.5), se sqrt(0.5); t(0.975,4) = 2.776445.
	m := Metric{Name: "c.x", LowerBetter: true, Primary: true, A: []float64{10, 10, 10, 10, 10}, B: []float64{11, 12, 13, 14, 15}}
	r, err := Judge([]Metric{m}, 0.05)
	if err != nil {
		t.Fatal(err)
	}
	j := r.Metrics[0]
	half := 2.776445 * math.Sqrt(0.5)
	if !near(j.Delta, 3, 1e-12) || !near(j.CILow, 3-half, 1e-4) || !near(j.CIHigh, 3+half, 1e-4) {
		t.Fatalf("interval = %v [%v, %v], want 3 [%v, %v]", j.Delta, j.CILow, j.CIHigh, 3-half, 3+half)
	}
	if j.Status != Worse || r.Verdict != Worse {
		t.Fatalf("status %s verdict %s, want worse", j.Status, r.Verdict)
	}
	if !near(j.RelDelta, 0.3, 1e-12) || !(j.MDE > 0) {
		t.Fatalf("rel %v mde %v", j.RelDelta, j.MDE)
	}
}

func TestDegenerateIntervalNeverSignificant(t *testing.T) {
	cases := []struct {
		name   string
		a, b   []float64
		status Status
	}{
		{"constant shift", []float64{1, 2, 3}, []float64{0.7727, 1.7727, 2.7727}, Inconclusive},
		{"one unit", []float64{1}, []float64{5}, Inconclusive},
		{"no units", nil, nil, Inconclusive},
		{"identical", []float64{1, 2}, []float64{1, 2}, NoDifference},
	}
	for _, c := range cases {
		r, err := Judge([]Metric{{Name: "c.x", Primary: true, A: c.a, B: c.b}}, 0.05)
		if err != nil {
			t.Fatal(err)
		}
		if got := r.Metrics[0].Status; got != c.status {
			t.Errorf("%s: status %s, want %s", c.name, got, c.status)
		}
	}
}

func TestUnpairedIsAnError(t *testing.T) {
	_, err := Judge([]Metric{{Name: "c.x", A: []float64{1, 2}, B: []float64{1}}, {A: nil}}, 0.05)
	if err == nil || !strings.Contains(err.Error(), "metrics[0] (c.x): 2 units on arm A, 1 on arm B") ||
		!strings.Contains(err.Error(), "metrics[1].name: empty") {
		t.Fatalf("err = %v", err)
	}
	if _, err := Judge(nil, 0); err == nil || !strings.Contains(err.Error(), "alpha") {
		t.Fatalf("alpha 0: err = %v", err)
	}
}

func TestHolmStepDown(t *testing.T) {
	js := []Judged{{P: 0.01}, {P: 0.04}, {P: 0.03}, {P: 0.5, Primary: true}}
	holm(js, []int{0, 1, 2})
	want := []float64{0.03, 0.06, 0.06, 0}
	for i, w := range want {
		if !near(js[i].PAdjusted, w, 1e-12) {
			t.Errorf("metric %d: adjusted %v, want %v", i, js[i].PAdjusted, w)
		}
	}
}

func TestVerdictFromPrimaries(t *testing.T) {
	for _, c := range []struct {
		st   []Status
		prim []bool
		want Status
	}{
		{[]Status{Better, Worse}, []bool{true, true}, Mixed},
		{[]Status{Better, Worse}, []bool{true, false}, Better},
		{[]Status{NoDifference, Inconclusive}, []bool{true, true}, Inconclusive},
		{[]Status{NoDifference, Worse}, []bool{false, false}, Worse},
		{[]Status{NoDifference}, []bool{true}, NoDifference},
		{nil, nil, Inconclusive},
	} {
		js := make([]Judged, len(c.st))
		for i := range js {
			js[i] = Judged{Status: c.st[i], Primary: c.prim[i]}
		}
		if got := verdict(js); got != c.want {
			t.Errorf("%v %v: %s, want %s", c.st, c.prim, got, c.want)
		}
	}
}

// TestAAFalseVerdictRate draws A and B from one distribution with a per-seed
// effect shared by both arms (the seed's workload) and checks that the
// comparison calls a difference in at most 5% (plus sampling slack) of 2000
// A/A comparisons of 10 seeds, and that a planted +10% shift is found.
func TestAAFalseVerdictRate(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	draw := func(shift float64) (*Result, error) {
		var ms []Metric
		for k, name := range []string{"interactive.ttft_p99_ms", "batch.ttft_p99_ms", "batch.goodput_rps"} {
			m := Metric{Name: name, LowerBetter: k < 2, Primary: k == 0}
			for s := 0; s < 10; s++ {
				seed := 100 + 20*rng.NormFloat64()
				m.A = append(m.A, seed+5*rng.NormFloat64())
				m.B = append(m.B, seed*(1+shift)+5*rng.NormFloat64())
			}
			ms = append(ms, m)
		}
		return Judge(ms, 0.05)
	}
	const n = 2000
	falses, found := 0, 0
	for i := 0; i < n; i++ {
		r, err := draw(0)
		if err != nil {
			t.Fatal(err)
		}
		if r.Verdict != NoDifference {
			falses++
		}
		r, err = draw(0.10)
		if err != nil {
			t.Fatal(err)
		}
		if r.Verdict == Worse {
			found++
		}
	}
	t.Logf("synthetic, %d comparisons of 10 seeds: A/A false verdicts %.4f, planted +10%% found %.4f", n, float64(falses)/n, float64(found)/n)
	if rate := float64(falses) / n; rate > 0.065 {
		t.Errorf("A/A false verdict rate %.3f, want <= 0.05 (+ slack)", rate)
	}
	if power := float64(found) / n; power < 0.95 {
		t.Errorf("planted +10%% found in %.3f of comparisons, want >= 0.95", power)
	}
}

// One unit gives no interval, and the result still encodes as JSON (an
// infinite bound once made `bench compare --json` fail).
func TestOneUnitEncodes(t *testing.T) {
	res, err := Judge([]Metric{{Name: "c.ttft_p99_ms", LowerBetter: true, Primary: true, A: []float64{10}, B: []float64{12}}}, 0.05)
	if err != nil {
		t.Fatal(err)
	}
	if res.Verdict != Inconclusive || res.Metrics[0].Status != Inconclusive {
		t.Fatalf("one unit: %+v", res)
	}
	if _, err := json.Marshal(res); err != nil {
		t.Fatalf("one unit does not encode: %v", err)
	}
}
