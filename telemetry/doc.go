// Package telemetry turns filter Observations into OpenTelemetry metrics
// and traces and exports them: a Prometheus endpoint for the gateway's admin
// listener and OTLP over gRPC for both hosts. Metric names follow the GenAI
// semantic conventions where they exist (gen_ai.server.time_to_first_token,
// gen_ai.server.time_per_output_token, gen_ai.server.request.duration,
// gen_ai.client.token.usage) and use llmesh.* otherwise; docs/metrics.md
// lists them with their Prometheus names.
//
// Concurrency and ownership: a Provider owns its meter and tracer providers
// and their exporters; the OTLP periodic reader and batch span processor run
// goroutines that the OpenTelemetry SDK owns and that stop in
// Provider.Shutdown. A Recorder is safe for concurrent use by every request
// of a host; its mutable state is the attribute cache behind a mutex and,
// in a Provider's Recorder, the inter-chunk histogram behind its own mutex,
// which request goroutines add to and the readers' Produce calls (the
// Prometheus scrape handler, the OTLP periodic reader) copy out.
package telemetry
