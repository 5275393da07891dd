// Package control is llmesh's xDS control plane. Build turns a compiled
// mesh config into Envoy listeners, routes, clusters and endpoints with the
// llmesh golang filter configured in them (pure, deterministic); Server
// serves them as go-control-plane snapshots over ADS, rebuilds on config
// file changes and on active-arm switches, and exposes an admin API.
//
// Concurrency and ownership:
//   - Server.Serve owns three goroutines and waits for all of them before
//     returning: the gRPC xDS server, the admin HTTP server and the config
//     Watcher's Run loop. All stop when Serve's context ends.
//   - Server.mu guards the served version, config, snapshot, the active-arm
//     switches and the last rejection. Building and installing a snapshot
//     happens under it, so versions are assigned in order. The watcher's
//     callbacks (on the watcher goroutine) and admin handlers (on HTTP
//     goroutines) both go through it.
//   - The go-control-plane snapshot cache does its own locking; the xDS
//     server's stream goroutines call the nodeTracker callbacks, which
//     guard per-node ACK/NACK state with the tracker's own mutex.
package control
