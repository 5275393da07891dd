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
// It imports only yaml.v3 and the standard library (plus the repository's
// clock), so the Envoy filter can link it cheaply; reloading a file on change
// is package config/watch.
//
// Concurrency: a *Config is immutable once compiled and is shared by
// pointer.
package config
