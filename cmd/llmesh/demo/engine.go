package demo

import (
	"time"

	"github.com/llmesh/llmesh/sim/server"
)

// EngineTiming is how the simulated engine of one run kept to its timing
// model (server.Pace). In one process with the gateway and the load
// generator, its loop's timer wake-ups come late; the loop credits each
// back-to-back step up to half its modelled time, so only delays beyond
// that slow the engine down (Drift).
type EngineTiming struct {
	// Steps is the number of engine steps; Model the sum of their
	// modelled durations.
	Steps int           `json:"steps"`
	Model time.Duration `json:"model_ns"`
	// BackToBack counts steps that followed the previous one without the
	// engine idling; LateP50/P99 are the loop's wake-up delays for them.
	BackToBack int           `json:"back_to_back"`
	LateP50    time.Duration `json:"late_p50_ns"`
	LateP99    time.Duration `json:"late_p99_ns"`
	// Drift is the total by which those steps fell behind the model.
	Drift time.Duration `json:"drift_ns"`
}

func engineTiming(p server.Pace) EngineTiming {
	return EngineTiming{Steps: p.Steps, Model: p.Modelled, BackToBack: p.BackToBack,
		LateP50: p.LateP50, LateP99: p.LateP99, Drift: p.Drift}
}

// Slowdown is the share of extra time the engine took: drift over
// modelled time (0 means it kept to the model).
func (t EngineTiming) Slowdown() float64 {
	if t.Model <= 0 {
		return 0
	}
	return float64(t.Drift) / float64(t.Model)
}
