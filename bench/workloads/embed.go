// Package workloads ships llmesh's standard workload files inside the binary,
// so `llmesh demo` and `llmesh bench` can use them from any directory.
package workloads

import "embed"

// FS holds the *.yaml workload files of this directory.
//
//go:embed *.yaml
var FS embed.FS

// Standard is the file name of the standard mixed-priority workload.
const Standard = "mixed-priority.yaml"
