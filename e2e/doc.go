// Package e2e holds the end-to-end tests: the built llmesh binary run as
// real processes (sim, gateway, shared scheduler, control plane) on random
// loopback ports, driven by `llmesh bench run`, and a real Prometheus
// server scraping them when the Debian package is installed. See
// docs/e2e.md.
//
// Ownership: the harness is testkit/proctest (see its doc.go). Each test
// owns the processes it starts: their cleanups interrupt, wait for and, on
// failure, print each one. The one goroutine a test starts itself, the
// gauge sampler in TestSharedScheduler, is stopped and waited for before
// the test reads what it sampled; proctest.Main checks for leaks after the
// suite.
package e2e
