// Package config is the mesh config shared by the gateway, the Envoy filter,
// the scheduler and the xDS control plane: the YAML schema (Mesh and its
// *Spec types), strict parsing with field-path errors, defaults, validation,
// and the compiled runtime form (Config) with references resolved and
// durations parsed.
//
// Loading is parse → defaults → compile:
//
//	cfg, err := config.LoadFile("mesh.yaml") // err is config.Errors: every problem, each with its path
//
// It imports only yaml.v3, fsnotify and the standard library (plus the
// repository's clock), so the Envoy filter can link it cheaply.
//
// Concurrency: a *Config is immutable once compiled and is shared by
// pointer. A Watcher owns the current *Config in an atomic.Pointer: the
// goroutine running Watcher.Run (started and stopped by the caller through
// its context) is the only one that starts reloads from file events;
// Reload may also be called from any goroutine and is serialised by the
// watcher's mutex, which also guards the hash of the last loaded bytes.
// OnChange and OnError run on the goroutine that performed the reload.
package config
