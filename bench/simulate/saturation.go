package simulate

import (
	"fmt"
	"slices"
	"time"

	"github.com/llmesh/llmesh/bench/result"
	"github.com/llmesh/llmesh/bench/workload"
	"github.com/llmesh/llmesh/scheduler/policy/fifo"
)

// SaturationInfo is how the saturation rate was measured.
type SaturationInfo struct {
	// RPS is the highest sustainable completion rate in requests per
	// second: load 1.0.
	RPS float64 `json:"rps"`
	// OutputTokensPerS is the output token rate over the same window.
	OutputTokensPerS float64 `json:"output_tokens_per_s"`
	// Requests is the size of the backlog; WindowS the measured window
	// (between the 10th and the 90th percentile of completions) in seconds.
	Requests int     `json:"requests"`
	WindowS  float64 `json:"window_s"`
	Method   string  `json:"method"`
}

const saturationMethod = "backlog of the workload's requests (its length and class mix) all arriving at t=0, " +
	"run through the same pool (fifo) and engine model in virtual time; " +
	"completions per second between the 10th and 90th percentile completion"

// Saturation is the highest request rate w's length mix sustains on the
// engine and pool that o describes (zero Options: the demo's pool in front
// of sim's default engine): load 1.0 of Evaluate. It takes a few hundred
// milliseconds.
func Saturation(w *workload.Workload, o Options) (float64, error) {
	o, err := o.withDefaults(w)
	if err != nil {
		return 0, err
	}
	s, err := saturation(o.prepare(w), o)
	if err != nil {
		return 0, err
	}
	return s.RPS, nil
}

// saturation keeps the pool full with a backlog: every request arrives at
// once, so the engine runs at the pool's capacity from the first step to
// the last; the edges (filling and draining) are cut off.
func saturation(w *workload.Workload, o Options) (*SaturationInfo, error) {
	c := *w
	c.Spec.Requests = o.SaturationRequests
	c.Spec.Duration = 0
	c.Spec.Warmup = workload.Warmup{}
	if c.Spec.Arrival.Process != workload.ArrivalTrace {
		// Any open process: arrival times are discarded below.
		c.Spec.Arrival.Process = workload.ArrivalConstant
		c.Spec.Arrival.Rate = 1
	}
	var items []workload.Item
	src := c.Source()
	for len(items) < o.SaturationRequests {
		it, ok := src.Next()
		if !ok {
			break
		}
		it.At, it.Warmup = 0, false
		items = append(items, it)
	}
	if len(items) < 20 {
		return nil, fmt.Errorf("saturation: the workload yields %d requests, need at least 20", len(items))
	}
	// The reference is what the engine sustains unrestricted, so that load
	// factors mean the same with and without the admission bounds.
	o.MaxPrefillTokens, o.ReserveUrgent, o.StaticBounds = 0, 0, true
	l, err := newLoop(&c, fifo.New(), o)
	if err != nil {
		return nil, err
	}
	l.recordAll = false
	recs, err := l.run(items)
	if err != nil {
		return nil, fmt.Errorf("saturation: %w", err)
	}
	type done struct {
		at  int64
		out int
	}
	var ds []done
	for _, r := range recs {
		if r.Status == result.StatusOK {
			ds = append(ds, done{r.DoneNS, r.OutputTokens})
		}
	}
	if len(ds) < 20 {
		return nil, fmt.Errorf("saturation: only %d of %d requests completed", len(ds), len(recs))
	}
	slices.SortFunc(ds, func(a, b done) int { return int(a.at - b.at) })
	lo, hi := len(ds)/10, len(ds)*9/10
	window := time.Duration(ds[hi].at - ds[lo].at)
	if window <= 0 {
		return nil, fmt.Errorf("saturation: completions span no time")
	}
	var out int
	for _, d := range ds[lo+1 : hi+1] {
		out += d.out
	}
	return &SaturationInfo{
		RPS:              float64(hi-lo) / window.Seconds(),
		OutputTokensPerS: float64(out) / window.Seconds(),
		Requests:         len(items), WindowS: window.Seconds(), Method: saturationMethod,
	}, nil
}
