// Package envoyhost runs llmesh-filter.so under a host program that speaks
// Envoy's side of the golang HTTP filter ABI, so that the SDK's own Go shim
// (contrib/golang/filters/http/source/go/pkg/http) and the cgo boundary run
// in the tests, not a fake of them.
//
// The host (host/*.cc, C++17, no Envoy or abseil dependency) includes the
// SDK's api.h from the Go module at build time, dlopens the .so as Envoy's
// dso.cc does and exports the 33 C functions the .so imports. It ports, in
// its own words, Envoy v1.36's per-stream state machine
// (contrib/golang/filters/http/source/processor_state.cc and
// golang_filter.cc), the checks of cgo.cc (a filter object already deleted
// answers CAPIFilterIsGone, a phase not held in Go CAPINotInGo, a filter
// after OnDestroy CAPIFilterIsDestroy), and what the filter relies on from
// source/common/http/filter_manager.cc: continueDecoding/Encoding, injected
// data continuing stopped headers, local replies through the encoder chain
// (and straight to the client once the upstream answered, a reset once the
// response started), the connection buffer limit (413).
//
// Threads: each worker is a thread with a dispatcher queue and owns its
// streams; the scenario runner posts every step to the stream's worker and
// waits for it, and calls from Go threads are posted to the worker as Envoy
// posts them (getters answer CAPIYield and resume Go through
// envoyGoRequestSemaDec). Anything Envoy would ASSERT is a violation, which
// fails the run.
//
// Scenarios (testdata/scenarios/*.txt) are small scripts: the filter config,
// then client and upstream events per stream, waits on stream conditions,
// and expect lines that TestScenarios checks against the host's JSON
// report. Each scenario runs in its own process, because the Go runtime in
// the .so cannot be unloaded. See docs/envoy-testing.md for the format.
//
// In driven mode (envoyhost -i) one process takes steps on stdin and writes
// each event as a JSON line as it happens; Driver is its Go client, which
// the cross-host conformance table (testkit/conformance) uses to play
// Envoy's codec and router around the real .so. BuildHost and BuildSO build
// the binaries for tests.
package envoyhost
