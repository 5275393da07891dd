package telemetry

import "github.com/llmesh/llmesh/exchange"

// ServerTiming is exchange.ServerTiming, the Server-Timing value of an
// observation (the core formats it; both hosts send it).
func ServerTiming(obs *exchange.Observation) string { return exchange.ServerTiming(obs) }
