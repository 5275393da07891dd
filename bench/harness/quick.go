package harness

import (
	"time"

	"github.com/llmesh/llmesh/bench/workload"
)

// Quick describes a one-class workload given on the command line.
type Quick struct {
	Protocol     string
	Model        string
	Rate         float64 // requests/s; 0 with Concurrency > 0 means closed loop
	Arrival      string  // constant, poisson (default) or gamma
	Burstiness   float64
	Concurrency  int
	Duration     time.Duration
	Requests     int
	Warmup       time.Duration
	PromptTokens int
	MaxTokens    int
	Seed         int64
	TTFTSLO      time.Duration
	TPOTSLO      time.Duration
}

// QuickSpec builds the Spec for q; it still needs Default and Validate
// (workload.Compile does both checks).
func QuickSpec(q Quick) *workload.Spec {
	s := &workload.Spec{
		Name: "quick", Protocol: q.Protocol, Model: q.Model, Seed: q.Seed,
		Duration: workload.Duration(q.Duration), Requests: q.Requests,
		Warmup:  workload.Warmup{Duration: workload.Duration(q.Warmup)},
		Arrival: workload.Arrival{Process: q.Arrival, Rate: q.Rate, Burstiness: q.Burstiness},
		Classes: []workload.ClassSpec{{
			Name: "default", Share: 1,
			SLO:    workload.SLO{TTFT: workload.Duration(q.TTFTSLO), TPOT: workload.Duration(q.TPOTSLO)},
			Prompt: workload.Dist{Kind: workload.DistFixed, Value: q.PromptTokens},
			Output: workload.Dist{Kind: workload.DistFixed, Value: q.MaxTokens},
		}},
	}
	if q.Rate == 0 && q.Concurrency > 0 {
		s.Arrival = workload.Arrival{Process: workload.ArrivalClosed, Concurrency: q.Concurrency}
	}
	f := false
	s.Classes[0].SendPriority = &f
	s.Default()
	return s
}
