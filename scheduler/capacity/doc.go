// Package capacity learns a pool's admission limit from its engine's
// Prometheus /metrics (vLLM names: vllm:num_requests_running,
// vllm:num_requests_waiting, vllm:kv_cache_usage_perc) and sets it on the
// scheduler. Rule documents how a sample moves the limit; when scrapes fail
// or the last good sample is older than stale_after, the limit is the static
// capacity (max_inflight). A watcher of one endpoint (a pool's endpoint
// with a metrics URL of its own) sets that endpoint's limit and load report
// instead, and drains it while its scrapes fail.
//
// Concurrency: Watcher.Run is one goroutine, owned by the caller and
// stopped by its context; it alone scrapes and calls Target.SetLimit (or the EndpointTarget
// methods).
// Status copies the watcher's state under a mutex that Run holds only to
// read and publish it.
package capacity
