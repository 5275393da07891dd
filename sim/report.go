package sim

import (
	"fmt"
	"io"
	"math"
	"sort"
)

// ProfileFitStats summarises how well one profile reproduces its points.
type ProfileFitStats struct {
	Profile        string  `json:"profile"`
	Points         int     `json:"points"`
	MedianRelErr   float64 `json:"median_rel_err"`
	MaxRelErr      float64 `json:"max_rel_err"`
	Excluded       int     `json:"excluded"`
	ExcludedMaxErr float64 `json:"excluded_max_rel_err"`
	// HeldOut counts the points measured to test the fit (Record.Holdout),
	// kept out of it; the errors are the model's on them.
	HeldOut             int     `json:"held_out"`
	HeldOutMedianRelErr float64 `json:"held_out_median_rel_err"`
	HeldOutMaxRelErr    float64 `json:"held_out_max_rel_err"`
}

// Stats computes per-profile fit statistics over the fitted points, with
// the held-out points and the excluded (launch- or overhead-bound) ones
// counted apart.
func (f *Fit) Stats() []ProfileFitStats {
	var out []ProfileFitStats
	for _, p := range f.Profiles {
		st := ProfileFitStats{Profile: p.Name}
		var errs, held []float64
		for _, fp := range f.Points {
			if fp.Profile != p.Name {
				continue
			}
			if fp.Holdout && !fp.Used {
				held = append(held, fp.RelErr)
				continue
			}
			if !fp.Used {
				st.Excluded++
				st.ExcludedMaxErr = math.Max(st.ExcludedMaxErr, fp.RelErr)
				continue
			}
			errs = append(errs, fp.RelErr)
		}
		st.Points, st.MedianRelErr, st.MaxRelErr = medianMax(errs)
		st.HeldOut, st.HeldOutMedianRelErr, st.HeldOutMaxRelErr = medianMax(held)
		out = append(out, st)
	}
	return out
}

// medianMax is the count, median and maximum of errs (zeros when empty);
// it sorts errs.
func medianMax(errs []float64) (n int, median, worst float64) {
	sort.Float64s(errs)
	n = len(errs)
	if n == 0 {
		return 0, 0, 0
	}
	median = errs[n/2]
	if n%2 == 0 {
		median = (errs[n/2-1] + errs[n/2]) / 2
	}
	return n, median, errs[n-1]
}

// WriteReport prints the fit: the shared coefficients, per-profile median
// and max relative error, and with verbose every point.
func (f *Fit) WriteReport(w io.Writer, verbose bool) error {
	if len(f.Profiles) == 0 {
		return fmt.Errorf("fit has no profiles")
	}
	tm := f.Profiles[0].Timing
	fmt.Fprintf(w, "timing model (shared by all profiles): %s\n", tm)
	fmt.Fprintf(w, "card ceilings: %.0f TFLOP/s bf16 GEMM, %.2f TB/s copy\n\n", tm.Hardware.FLOPs/1e12, tm.Hardware.BytesPerSecond/1e12)
	fmt.Fprintf(w, "%-18s %6s %10s %10s   %-26s %s\n", "profile", "points", "median", "max", "held out (median, max)", "excluded (launch- or overhead-bound short prefills)")
	for _, st := range f.Stats() {
		held := "0"
		if st.HeldOut > 0 {
			held = fmt.Sprintf("%d (%.1f%%, %.1f%%)", st.HeldOut, 100*st.HeldOutMedianRelErr, 100*st.HeldOutMaxRelErr)
		}
		fmt.Fprintf(w, "%-18s %6d %9.1f%% %9.1f%%   %-26s %d (max %.1f%%)\n", st.Profile, st.Points, 100*st.MedianRelErr, 100*st.MaxRelErr, held, st.Excluded, 100*st.ExcludedMaxErr)
	}
	if !verbose {
		return nil
	}
	fmt.Fprintf(w, "\n%-18s %-14s %5s %6s %6s %5s %10s %10s %7s\n", "profile", "kind", "B", "C", "T", "P", "measured", "model", "error")
	for _, p := range f.Points {
		note := ""
		if !p.Used {
			note = "  (excluded: " + p.Why + ")"
		}
		fmt.Fprintf(w, "%-18s %-14s %5d %6d %6d %5d %8.3fms %8.3fms %6.1f%%%s\n", p.Profile, p.Kind, p.B, p.C, p.T, p.P, p.MS, p.Predicted, 100*p.RelErr, note)
	}
	return nil
}
