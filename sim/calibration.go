package sim

import (
	"bufio"
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"math"
	"strings"
)

// calibrationH200 is the measured H200 data the built-in profiles are fitted
// to (a copy of the shared calibration file, kept beside the code so the
// binary needs no data files).
//
//go:embed calibration/h200-bf16-decoder-shapes.jsonl
var calibrationH200 []byte

// CalibrationH200 returns a copy of the embedded H200 calibration file.
func CalibrationH200() []byte { return append([]byte(nil), calibrationH200...) }

// calibrationH200Cached is the measured H200 data of prefills after a cached
// prefix (a copy of calibration/h200-prefix-cached.jsonl at the repository
// root); the built-in profiles are fitted to it too, except the points it
// marks as held out.
//
//go:embed calibration/h200-prefix-cached.jsonl
var calibrationH200Cached []byte

// CalibrationH200Cached returns a copy of the embedded cached-prefix
// prefill calibration file.
func CalibrationH200Cached() []byte { return append([]byte(nil), calibrationH200Cached...) }

// BuiltinCalibration is the data the built-in profiles are fitted to: the
// embedded shape calibration and the cached-prefix prefills, with the card
// ceilings of the former. Held-out points are included (marked Holdout);
// FitProfiles leaves them out.
func BuiltinCalibration() (*Calibration, error) {
	cal, err := ParseCalibration(calibrationH200)
	if err != nil {
		return nil, fmt.Errorf("h200-bf16-decoder-shapes.jsonl: %w", err)
	}
	cached, err := ParseCalibration(calibrationH200Cached)
	if err != nil {
		return nil, fmt.Errorf("h200-prefix-cached.jsonl: %w", err)
	}
	cal.Points = append(cal.Points, cached.Points...)
	return cal, nil
}

// Record kinds of the calibration file.
const (
	KindCeiling      = "ceiling"
	KindShape        = "shape"
	KindPrefill      = "prefill"
	KindPrefillGraph = "prefill_graph"
	KindDecode       = "decode"
	KindMixed        = "mixed"
	// KindPrefillCached is a prefill of T new tokens after C tokens whose KV
	// is already in the cache, captured in a CUDA graph.
	KindPrefillCached = "prefill_cached"
)

// Record is one line of a calibration file. Which fields are set depends on
// Kind (see the calibration README): prefill records have T, decode records B
// and C, mixed records B, C and P, prefill_cached records T and C.
type Record struct {
	Kind           string  `json:"kind"`
	What           string  `json:"what,omitempty"`
	TFLOPs         float64 `json:"tflops,omitempty"`
	TBps           float64 `json:"tbps,omitempty"`
	Model          string  `json:"model,omitempty"`
	LayersMeasured int     `json:"layers_measured,omitempty"`
	LayersFull     int     `json:"layers_full,omitempty"`
	B              int     `json:"B,omitempty"`
	C              int     `json:"C,omitempty"`
	T              int     `json:"T,omitempty"`
	P              int     `json:"P,omitempty"`
	MS             float64 `json:"ms,omitempty"`
	Error          string  `json:"error,omitempty"`
	// Holdout marks a point measured to test a fit, never to fit on.
	Holdout bool `json:"holdout,omitempty"`
}

// Calibration is a parsed calibration file.
type Calibration struct {
	// GEMMFLOPs and CopyBytesPerSec are the card's measured ceilings (FLOP/s
	// and bytes/s); zero when the file has none.
	GEMMFLOPs       float64
	CopyBytesPerSec float64
	// Points are the timed records (prefill, prefill_graph, decode, mixed,
	// prefill_cached) without errors, in file order.
	Points []Record
}

// Limits on calibration input, so a hostile file cannot make the fit
// allocate without bound.
const (
	maxCalibrationLine    = 64 << 10
	maxCalibrationRecords = 100000
	maxCalibrationDim     = 1 << 24
)

// ParseCalibration reads a calibration file: one JSON object per line, blank
// lines ignored. Errors name the line and the field.
func ParseCalibration(data []byte) (*Calibration, error) {
	c := &Calibration{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), maxCalibrationLine)
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		var r Record
		if err := json.Unmarshal([]byte(text), &r); err != nil {
			return nil, fmt.Errorf("calibration line %d: %w", line, err)
		}
		if err := r.validate(); err != nil {
			return nil, fmt.Errorf("calibration line %d: %w", line, err)
		}
		switch r.Kind {
		case KindCeiling:
			switch r.What {
			case "bf16_gemm_8192":
				c.GEMMFLOPs = r.TFLOPs * 1e12
			case "d2d_copy_2GiB":
				c.CopyBytesPerSec = r.TBps * 1e12
			}
		case KindPrefill, KindPrefillGraph, KindDecode, KindMixed, KindPrefillCached:
			if r.Error != "" {
				continue
			}
			if len(c.Points) >= maxCalibrationRecords {
				return nil, fmt.Errorf("calibration line %d: more than %d timed records", line, maxCalibrationRecords)
			}
			c.Points = append(c.Points, r)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("calibration line %d: %w", line+1, err)
	}
	return c, nil
}

func (r *Record) validate() error {
	bad := func(f float64) bool { return math.IsNaN(f) || math.IsInf(f, 0) || f < 0 }
	dim := func(name string, v int) error {
		if v < 0 || v > maxCalibrationDim {
			return fmt.Errorf("%s: %d out of range [0, %d]", name, v, maxCalibrationDim)
		}
		return nil
	}
	switch r.Kind {
	case KindCeiling:
		if bad(r.TFLOPs) || bad(r.TBps) {
			return fmt.Errorf("ceiling %q: value must be a finite non-negative number", r.What)
		}
		return nil
	case KindShape:
		return nil
	case KindPrefill, KindPrefillGraph, KindDecode, KindMixed, KindPrefillCached:
	default:
		return fmt.Errorf("kind: unknown %q", r.Kind)
	}
	if r.Model == "" {
		return fmt.Errorf("model: missing")
	}
	for _, d := range []struct {
		n string
		v int
	}{{"B", r.B}, {"C", r.C}, {"T", r.T}, {"P", r.P}, {"layers_measured", r.LayersMeasured}, {"layers_full", r.LayersFull}} {
		if err := dim(d.n, d.v); err != nil {
			return err
		}
	}
	if r.Error != "" {
		return nil
	}
	if bad(r.MS) || r.MS == 0 {
		return fmt.Errorf("ms: %v must be a finite positive number", r.MS)
	}
	switch r.Kind {
	case KindPrefill, KindPrefillGraph, KindPrefillCached:
		if r.T == 0 {
			return fmt.Errorf("T: must be positive for %s", r.Kind)
		}
	case KindDecode:
		if r.B == 0 {
			return fmt.Errorf("B: must be positive for decode")
		}
	case KindMixed:
		if r.B == 0 || r.P == 0 {
			return fmt.Errorf("B and P: must be positive for mixed")
		}
	}
	return nil
}
