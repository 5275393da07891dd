// Package schedserve is the process wiring of `llmesh scheduler serve`:
// around a scheduler/server.Service it builds the mesh config file's
// watcher, the identities file's watcher, the SIGHUP reloads, and the
// admin HTTP server (GET /metrics from a Prometheus registry holding the
// service's metrics and the process's and the Go runtime's, GET /healthz).
// It is kept out of scheduler/server so that the library links neither
// file watchers nor an HTTP server of its own; cmd/llmesh runs it.
//
// Goroutines: Run owns them all and returns after every one has ended. It
// starts one per watched file (config/watch.Changes; a change runs the
// reload on that goroutine), one for the hangup channel (when given), one
// for the admin server (when given a listener), and runs Service.Serve on
// its own goroutine. A reload of the mesh file goes through
// config/watch.Watcher, whose mutex serialises the file goroutine's and
// the hangup goroutine's reloads; the identities reloads are serialised by
// identitiesFile's mutex, which also guards the hash of the bytes last
// loaded. Log lines from every goroutine go through one mutex-guarded
// writer.
package schedserve
