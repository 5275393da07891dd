package sim

import (
	"bytes"
	"os"
	"testing"
	"time"
)

// TestCachedHoldout checks the built-in timing model on prefills after a
// cached prefix that the fit never saw: the points of the embedded
// h200-prefix-cached.jsonl marked "holdout" (off-grid T and C). The model
// predicts them through StepShape.AddPrefill(T, C), as the engine does.
func TestCachedHoldout(t *testing.T) {
	fit, err := BuiltinFit()
	if err != nil {
		t.Fatal(err)
	}
	var heldLong, heldShort, trainLong []float64
	for _, p := range fit.Points {
		if p.Kind != KindPrefillCached {
			continue
		}
		if p.Holdout && p.Used {
			t.Errorf("%s T=%d C=%d: held-out point used in the fit", p.Profile, p.T, p.C)
		}
		signed := (p.Predicted - p.MS) / p.MS
		switch {
		case p.Holdout && p.T >= 1024:
			heldLong = append(heldLong, p.RelErr)
			t.Logf("held out %-16s T=%5d C=%5d: measured %7.2f ms, model %7.2f ms (%+.1f%%)", p.Profile, p.T, p.C, p.MS, p.Predicted, 100*signed)
		case p.Holdout:
			heldShort = append(heldShort, p.RelErr)
			t.Logf("held out %-16s T=%5d C=%5d: measured %7.2f ms, model %7.2f ms (%+.1f%%)", p.Profile, p.T, p.C, p.MS, p.Predicted, 100*signed)
		case p.Used && p.T >= 1024:
			trainLong = append(trainLong, p.RelErr)
		}
	}
	n, med, worst := medianMax(heldLong)
	t.Logf("held out, T >= 1024: %d points, median %.1f%%, max %.1f%%", n, 100*med, 100*worst)
	if n != 24 {
		t.Errorf("%d held-out points with T >= 1024, want 24", n)
	}
	if med > 0.05 || worst > 0.10 {
		t.Errorf("held out, T >= 1024: median %.1f%%, max %.1f%%; want <= 5%% and <= 10%%", 100*med, 100*worst)
	}
	n, med, worst = medianMax(heldShort)
	t.Logf("held out, T < 1024: %d points, median %.1f%%, max %.1f%%", n, 100*med, 100*worst)
	if worst > 0.10 {
		t.Errorf("held out, T < 1024: max %.1f%%, want <= 10%%", 100*worst)
	}
	n, med, worst = medianMax(trainLong)
	t.Logf("fitted grid, T >= 1024: %d points, median %.1f%%, max %.1f%%", n, 100*med, 100*worst)
	if med > 0.05 || worst > 0.11 {
		t.Errorf("fitted grid, T >= 1024: median %.1f%%, max %.1f%%; want <= 5%% and <= 11%%", 100*med, 100*worst)
	}
}

// TestCachedPrefixCostsMore checks the shape of the fitted cached-prefix
// terms: a prefill after a cached prefix takes longer than the same prefill
// from an empty cache, more so the longer the prefix, and the new features
// vanish without one, so decode and from-empty prefill steps keep the
// terms they had.
func TestCachedPrefixCostsMore(t *testing.T) {
	for _, name := range Profiles() {
		p, err := LookupProfile(name)
		if err != nil {
			t.Fatal(err)
		}
		tm := p.Timing
		if tm.Coef[featCrossAttn] <= tm.Coef[featPrefillAttn] {
			t.Errorf("%s: cross attention coefficient %.3g not above self attention %.3g", name, tm.Coef[featCrossAttn], tm.Coef[featPrefillAttn])
		}
		prev := time.Duration(0)
		for _, c := range []int{0, 1024, 8192, 32768} {
			var s StepShape
			s.AddPrefill(2048, c)
			d := tm.StepDuration(&s)
			if d <= prev {
				t.Errorf("%s: prefill 2048 after %d cached took %v, not more than with a shorter prefix (%v)", name, c, d, prev)
			}
			prev = d
		}
		var s StepShape
		s.AddDecodes(8, 4096)
		s.AddPrefill(512, 0)
		if f := features(tm.Hardware, tm.Roofline, tm.Shape, tm.Shape.Layers, &s); f[featCrossAttn] != 0 {
			t.Errorf("%s: cross attention feature %g without a cached prefix", name, f[featCrossAttn])
		}
	}
}

// The embedded copy of the cached-prefix data is the repository's file.
func TestCachedCalibrationCopy(t *testing.T) {
	data, err := os.ReadFile("../calibration/h200-prefix-cached.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(data, calibrationH200Cached) {
		t.Error("sim/calibration/h200-prefix-cached.jsonl differs from calibration/h200-prefix-cached.jsonl: copy it again")
	}
	cal, err := ParseCalibration(data)
	if err != nil {
		t.Fatal(err)
	}
	held := 0
	for _, r := range cal.Points {
		if r.Kind != KindPrefillCached {
			t.Errorf("record of kind %q in the cached-prefix file", r.Kind)
		}
		if r.Holdout {
			held++
		}
	}
	if len(cal.Points) != 156 || held != 30 {
		t.Errorf("%d points, %d held out; want 156 and 30", len(cal.Points), held)
	}
}
