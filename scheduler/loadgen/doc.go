// Package loadgen measures the shared scheduler service: many proxies
// (each a scheduler.Admitter, normally a scheduler/client.Client with its
// own connection) send admit → first token → release at a target rate
// (open loop, Poisson or uniform arrivals, sent on time to well under a
// millisecond) or with a fixed number in flight (closed loop), and Run
// reports admissions per second, the decision latency (Admit call to
// answer) quantiles, rejections, errors and, open loop, the latency from
// each request's scheduled send (so a late send counts and coordinated
// omission cannot hide it) and how late this client itself sent.
//
// Concurrency: open loop, Run owns one pacer goroutine that alone draws
// every arrival and the request mix, hands the arrivals to the proxies in
// turn and starts one goroutine per request; closed loop, Run owns one
// goroutine per proxy that draws requests for the proxy's workers (one
// goroutine per request in flight). Every goroutine ends by
// the run's end (requests outstanding then are waited for); the proxy's
// recorder is written under its mutex and atomics and read by Run after
// they have all ended.
package loadgen
