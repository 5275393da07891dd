// Package controlproc is the process wiring of `llmesh control`: around a
// control.Server it builds the mesh config file's watcher (a changed file
// goes to Server.Reload, one that cannot be loaded to Server.Reject) and
// the admin HTTP server for Server.AdminHandler. It is kept out of package
// control so that the library links no file watcher or HTTP server of its
// own; cmd/llmesh and cmd/llmesh/demo run it.
//
// Goroutines: Plane.Serve owns them all and returns after every one has
// ended: the xDS server (control.Server.Serve), the admin HTTP server
// (when given a listener) and the config watcher's Run loop, whose
// callbacks run the reloads on its goroutine. The first to fail ends the
// others.
package controlproc
