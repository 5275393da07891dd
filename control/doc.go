// Package control is llmesh's xDS control plane. Build turns a compiled
// mesh config into Envoy listeners, routes, clusters and endpoints with the
// llmesh golang filter configured in them (pure, deterministic); Server
// serves them as go-control-plane snapshots over ADS, rebuilds on
// Server.Reload (a changed config file) and on active-arm switches, and
// exposes an admin API handler. The process around it (the config file's
// watcher, the listeners, the admin HTTP server) is wired by its command,
// cmd/llmesh/controlproc.
//
// Concurrency and ownership:
//   - Server.Serve owns the gRPC xDS server's goroutine and waits for it
//     before returning; it stops when Serve's context ends.
//   - Server.mu guards the served version, config, snapshot, the active-arm
//     switches and the last rejection. Building and installing a snapshot
//     happens under it, so versions are assigned in order. Reload and Reject
//     (called from the caller's file watcher goroutine) and the admin
//     handlers (on HTTP goroutines) all go through it.
//   - The go-control-plane snapshot cache does its own locking; the xDS
//     server's stream goroutines call the nodeTracker callbacks, which
//     guard per-node ACK/NACK state with the tracker's own mutex.
package control
