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
// of a host. Its series (one per class and model, with the attribute sets)
// are made under the Recorder's mutex and change after only in their
// references to data points (see below); the series of the last request
// is kept in an atomic pointer. In a Provider's
// Recorder the per-request measurements go to the Recorder's aggregation,
// whose one mutex guards every data point and the series' references to
// them: request goroutines add to them under it, and the readers' Produce
// calls (the Prometheus scrape handler, the OTLP periodic reader), each
// through its own producer, copy them out under it. The package starts no
// goroutine of its own.
package telemetry
