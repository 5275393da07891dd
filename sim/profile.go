package sim

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
)

// Profile is a model on a card: its shape, limits and fitted timing model.
type Profile struct {
	// Name is what --profile and the OpenAI "model" field use.
	Name string
	// Calibration is the model name in the calibration file.
	Calibration string
	Shape       Shape
	// MaxContext is the longest prompt+output the model accepts, in tokens.
	MaxContext int
	// KVCacheTokens is the default KV cache capacity: what is left of the
	// card's memory after weights and activations, in tokens.
	KVCacheTokens int
	Timing        *TimingModel
}

// h200 is the card the built-in profiles describe.
var h200 = struct {
	memBytes float64
}{memBytes: 141e9}

var builtinShapes = []struct {
	name, calib string
	shape       Shape
	maxContext  int
}{
	{"llama3-8b-h200", "llama3-8b", Shape{4096, 32, 32, 8, 128, 14336, 128256}, 131072},
	{"qwen2.5-7b-h200", "qwen2.5-7b", Shape{3584, 28, 28, 4, 128, 18944, 152064}, 32768},
	{"llama3-70b-h200", "llama3-70b", Shape{8192, 80, 64, 8, 128, 28672, 128256}, 131072},
}

var (
	profilesOnce sync.Once
	profiles     map[string]*Profile
	profilesFit  *Fit
	profilesErr  error
)

// DefaultProfile is the profile used when none is named.
const DefaultProfile = "llama3-8b-h200"

// Profiles lists the built-in profile names, sorted.
func Profiles() []string {
	var out []string
	for _, b := range builtinShapes {
		out = append(out, b.name)
	}
	sort.Strings(out)
	return out
}

// LookupProfile returns the built-in profile called name, fitted to the
// embedded H200 calibration data (BuiltinCalibration).
func LookupProfile(name string) (*Profile, error) {
	profilesOnce.Do(func() {
		cal, err := BuiltinCalibration()
		if err != nil {
			profilesErr = err
			return
		}
		profilesFit, profilesErr = FitProfiles(cal, BuiltinRoofline)
		if profilesErr != nil {
			return
		}
		profiles = map[string]*Profile{}
		for _, p := range profilesFit.Profiles {
			profiles[p.Name] = p
		}
	})
	if profilesErr != nil {
		return nil, fmt.Errorf("built-in calibration: %w", profilesErr)
	}
	p, ok := profiles[name]
	if !ok {
		return nil, fmt.Errorf("profile %q unknown (have %s)", name, strings.Join(Profiles(), ", "))
	}
	return p, nil
}

// BuiltinFit is the fit of the built-in profiles to the embedded
// calibration, with its per-point residuals.
func BuiltinFit() (*Fit, error) {
	if _, err := LookupProfile(DefaultProfile); err != nil {
		return nil, err
	}
	return profilesFit, nil
}

// Fit is a fitted set of profiles and how well they reproduce the points.
type Fit struct {
	Profiles []*Profile
	// Points are the calibration points with predictions, including those
	// left out of the fit (Used false) with the reason.
	Points []FitPoint
	sqErr  float64 // weighted sum of squared relative errors over the fitted points
}

// FitPoint is one calibration point against the model.
type FitPoint struct {
	Record
	Profile   string
	Predicted float64 // ms, with the layers that were measured
	Used      bool
	Why       string // why a point was left out of the fit
	RelErr    float64
}

// eagerFloorTokens: eager (non-graph) prefills shorter than this are bound
// by kernel launches, which serving engines avoid with graphs; they are
// reported but not fitted.
const eagerFloorTokens = 1024

// Cached-prefix prefill points (KindPrefillCached) enter the fit with
// these rules. Those of fewer than cachedFloorTokens new tokens are reported
// but not fitted: their time is the per-step and per-layer overheads that
// the decode points already fix, and they are the noisiest of the set
// (llama3-8b's 64 tokens after 4096 cached measured slower than after 8192).
// The rest weigh cachedPrefillWeight each against 1 for every other point:
// they are 105 prefills against 127 points of all other kinds together, and
// at full weight they would pull the shared coefficients towards prefills at
// the cost of decode and mixed steps.
const (
	cachedFloorTokens   = 256
	cachedPrefillWeight = 0.5
)

// fitWeight is a fitted point's weight in the least-squares sum.
func fitWeight(r *Record) float64 {
	if r.Kind == KindPrefillCached {
		return cachedPrefillWeight
	}
	return 1
}

// stepOf turns a calibration record into the step it timed.
func stepOf(r *Record) StepShape {
	var s StepShape
	switch r.Kind {
	case KindPrefill, KindPrefillGraph:
		s.AddPrefill(r.T, 0)
	case KindDecode:
		s.AddDecodes(r.B, r.C+1)
	case KindMixed:
		s.AddDecodes(r.B, r.C+1)
		s.AddPrefill(r.P, 0)
	case KindPrefillCached:
		s.AddPrefill(r.T, r.C)
	}
	return s
}

// Grids of the roofline's shape parameters searched by FitProfiles.
var (
	fitRatios    = []float64{1, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7, 1.8, 1.9, 2, 2.2, 2.4, 2.7, 3}
	fitSharpness = []float64{1, 1.5, 2, 3, 4, 6, 8}
	fitWidthExp  = []float64{0, 0.25, 0.5, 0.75, 1, 1.25, 1.5}
)

// BuiltinRoofline is the roofline shape the built-in profiles use: what
// SearchRoofline finds on the embedded calibration (a test keeps the two in
// step). It is fixed here so that looking up a profile costs one small
// least-squares solve rather than the whole grid search.
var BuiltinRoofline = Roofline{Ratio: 1.5, Sharpness: 3, WidthExponent: 0.25}

// SearchRoofline fits the calibration for every roofline shape on a grid
// and returns the fit with the least squared relative error.
func SearchRoofline(cal *Calibration) (*Fit, error) {
	var best *Fit
	bestErr := math.Inf(1)
	for _, ratio := range fitRatios {
		for _, k := range fitSharpness {
			for _, w := range fitWidthExp {
				f, err := FitProfiles(cal, Roofline{Ratio: ratio, Sharpness: k, WidthExponent: w})
				if err != nil {
					return nil, err
				}
				if f.sqErr < bestErr {
					best, bestErr = f, f.sqErr
				}
			}
		}
	}
	return best, nil
}

// FitProfiles fits one timing model shared by all built-in shapes (the
// coefficients describe the card and the software stack, the features the
// model) to the calibration's points, minimising relative error, with the
// roofline shape rl.
func FitProfiles(cal *Calibration, rl Roofline) (*Fit, error) {
	hw := Hardware{FLOPs: cal.GEMMFLOPs, BytesPerSecond: cal.CopyBytesPerSec}
	if hw.FLOPs <= 0 || hw.BytesPerSecond <= 0 {
		return nil, fmt.Errorf("calibration: missing ceiling records (bf16_gemm_8192, d2d_copy_2GiB)")
	}
	shapes := map[string]int{}
	for i, b := range builtinShapes {
		shapes[b.calib] = i
	}
	fit := &Fit{}
	type sample struct {
		r      Record
		sh     Shape
		layers int
		step   StepShape
	}
	var used []sample
	for _, r := range cal.Points {
		i, ok := shapes[r.Model]
		if !ok {
			continue
		}
		sh := builtinShapes[i].shape
		layers := r.LayersMeasured
		if layers == 0 {
			layers = sh.Layers
		}
		fp := FitPoint{Record: r, Profile: builtinShapes[i].name, Used: true}
		if r.Kind == KindPrefill && r.T < eagerFloorTokens {
			fp.Used, fp.Why = false, "eager prefill below 1K tokens is launch-bound"
		}
		if r.Kind == KindPrefillCached && r.T < cachedFloorTokens {
			fp.Used, fp.Why = false, "cached-prefix prefill below 256 tokens is overhead-bound"
		}
		if r.Holdout {
			fp.Used, fp.Why = false, "held out to test the fit"
		}
		fit.Points = append(fit.Points, fp)
		if fp.Used {
			used = append(used, sample{r, sh, layers, stepOf(&r)})
		}
	}
	if len(used) < 2*numFeatures {
		return nil, fmt.Errorf("calibration: %d usable points, need at least %d", len(used), 2*numFeatures)
	}
	// Least squares on relative error: each row is the features over the
	// measured time, with target 1, weighted by fitWeight. Solved on the
	// normal equations.
	G := make([][]float64, numFeatures)
	for i := range G {
		G[i] = make([]float64, numFeatures)
	}
	c := make([]float64, numFeatures)
	for i := range used {
		u := &used[i]
		f := features(hw, rl, u.sh, u.layers, &u.step)
		inv := 1e3 / u.r.MS
		for i := range f {
			f[i] *= inv
		}
		w := fitWeight(&u.r)
		for i := range f {
			c[i] += w * f[i]
			for j := range f {
				G[i][j] += w * f[i] * f[j]
			}
		}
	}
	coef := nnls(G, c)
	fit.sqErr = 0
	for i := range used {
		fit.sqErr += fitWeight(&used[i].r)
	}
	for i := range coef {
		fit.sqErr -= 2 * c[i] * coef[i]
		for j := range coef {
			fit.sqErr += coef[i] * G[i][j] * coef[j]
		}
	}
	for _, b := range builtinShapes {
		tm := &TimingModel{Hardware: hw, Shape: b.shape, Roofline: rl}
		copy(tm.Coef[:], coef)
		p := &Profile{Name: b.name, Calibration: b.calib, Shape: b.shape, MaxContext: b.maxContext, Timing: tm}
		p.KVCacheTokens = defaultKVTokens(b.shape)
		fit.Profiles = append(fit.Profiles, p)
	}
	for i := range fit.Points {
		fp := &fit.Points[i]
		var tm *TimingModel
		for _, p := range fit.Profiles {
			if p.Name == fp.Profile {
				tm = p.Timing
			}
		}
		s := stepOf(&fp.Record)
		layers := fp.LayersMeasured
		if layers == 0 {
			layers = tm.Shape.Layers
		}
		fp.Predicted = tm.stepSeconds(&s, layers) * 1e3
		fp.RelErr = math.Abs(fp.Predicted-fp.MS) / fp.MS
	}
	return fit, nil
}

// defaultKVTokens sizes the KV cache like vLLM with gpu_memory_utilization
// 0.9: card memory times 0.9, minus weights and an activation reserve. A
// model that does not fit one card (70B bf16) is taken as served by tensor
// parallelism over enough cards that each holds its share of weights and
// cache, so the per-card cache is what is left over on one card.
func defaultKVTokens(sh Shape) int {
	usable := 0.9 * h200.memBytes
	weights := sh.WeightBytes()
	cards := math.Ceil(weights / (0.6 * usable))
	free := cards*usable - weights - cards*4e9
	return int(free / sh.KVBytesPerToken())
}

// Evaluate scores this fit's profiles on another calibration's points (for
// instance measurements it was not fitted on) without refitting. Points of
// models it has no profile for are skipped.
func (f *Fit) Evaluate(cal *Calibration) *Fit {
	out := &Fit{Profiles: f.Profiles}
	for _, r := range cal.Points {
		var tm *TimingModel
		var name string
		for _, p := range f.Profiles {
			if p.Calibration == r.Model {
				tm, name = p.Timing, p.Name
			}
		}
		if tm == nil {
			continue
		}
		fp := FitPoint{Record: r, Profile: name, Used: true}
		if r.Kind == KindPrefill && r.T < eagerFloorTokens {
			fp.Used, fp.Why = false, "eager prefill below 1K tokens is launch-bound"
		}
		s := stepOf(&r)
		layers := r.LayersMeasured
		if layers == 0 {
			layers = tm.Shape.Layers
		}
		fp.Predicted = tm.stepSeconds(&s, layers) * 1e3
		fp.RelErr = math.Abs(fp.Predicted-fp.MS) / fp.MS
		out.Points = append(out.Points, fp)
	}
	return out
}
