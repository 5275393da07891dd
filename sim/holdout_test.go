package sim

import (
	"os"
	"testing"
)

// TestHoldoutMeasurements checks the built-in model, fitted on the shared
// calibration file only, against H200 measurements of grid points that file
// leaves out (calibration/holdout-h200.jsonl, made by
// calibration/holdout.py): decode at 4K context, 4K-token prefills, a
// 256-token graph prefill and mixed steps of other shapes.
func TestHoldoutMeasurements(t *testing.T) {
	data, err := os.ReadFile("calibration/holdout-h200.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	cal, err := ParseCalibration(data)
	if err != nil {
		t.Fatal(err)
	}
	fit, err := BuiltinFit()
	if err != nil {
		t.Fatal(err)
	}
	ev := fit.Evaluate(cal)
	if len(ev.Points) < 30 {
		t.Fatalf("only %d held-out points", len(ev.Points))
	}
	for _, p := range ev.Points {
		if p.Used && p.RelErr > 0.12 {
			t.Errorf("%s %s B=%d C=%d T=%d P=%d: model %.2f ms, measured %.2f (%.1f%%)", p.Profile, p.Kind, p.B, p.C, p.T, p.P, p.Predicted, p.MS, 100*p.RelErr)
		}
	}
	for _, st := range ev.Stats() {
		t.Logf("%s: %d held-out points, median %.1f%%, max %.1f%%", st.Profile, st.Points, 100*st.MedianRelErr, 100*st.MaxRelErr)
	}
}
