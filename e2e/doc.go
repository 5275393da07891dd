// Package e2e holds the end-to-end tests: the built llmesh binary run as
// real processes (sim, gateway, shared scheduler, control plane) on random
// loopback ports, driven by `llmesh bench run`, and a real Prometheus
// server scraping them when the Debian package is installed. See
// docs/e2e.md.
//
// Ownership: each test owns the processes it starts (startBin registers a
// cleanup that interrupts, waits for and, on failure, prints each one); the
// only goroutine per process waits for its exit and closes proc.done. Output
// buffers are shared between that process's pipe copiers and the test
// goroutine and are guarded by a mutex.
package e2e
