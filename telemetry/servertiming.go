package telemetry

import "github.com/llmesh/llmesh/filter"

// ServerTiming is filter.ServerTiming, the Server-Timing value of an
// observation (the core formats it; both hosts send it).
func ServerTiming(obs *filter.Observation) string { return filter.ServerTiming(obs) }
