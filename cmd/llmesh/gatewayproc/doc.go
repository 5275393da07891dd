// Package gatewayproc is the process wiring of `llmesh gateway`: from a
// mesh config file (watched, valid changes applied live) or the quick-mode
// settings it builds the telemetry providers, the scheduler set with its
// capacity watchers (or the client of a shared scheduler service), the
// experiment arms and a gateway.Gateway, binds the data and admin
// listeners, and serves until the context ends. It is kept out of package
// gateway so that the library links neither config watchers, scheduler
// clients nor exporters of its own; cmd/llmesh runs it, cmd/llmesh/demo/stack is handed
// it by cmd/llmesh.
//
// Goroutines: Run owns them all and returns after every one has ended. It
// starts one for Gateway.Serve (data plane, drained for Config.Drain when
// ctx ends), one for the admin server (when there is an admin address), one
// for the config watcher (mesh mode), whose OnChange callback runs the
// reload (Experiments.FileChanged → host.applyMesh) on that goroutine, and
// the capacity watchers through pools.MeshSet.Start, which run until ctx
// ends or the set is closed. The first of them to fail cancels the others.
// The host's fields are set before any of these start and not written
// after; reloads and arm switches are serialised by gateway.Experiments.
package gatewayproc
