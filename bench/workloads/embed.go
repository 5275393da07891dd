// Package workloads ships llmesh's standard workload files inside the binary,
// so `llmesh demo` and `llmesh bench` can use them from any directory.
package workloads

import (
	"embed"
	"fmt"

	"github.com/llmesh/llmesh/bench/workload"
)

// FS holds the *.yaml workload files of this directory.
//
//go:embed *.yaml
var FS embed.FS

// Standard is the file name of the standard mixed-priority workload.
const Standard = "mixed-priority.yaml"

// LoadStandard parses, defaults, validates and compiles the standard
// workload.
func LoadStandard() (*workload.Workload, error) {
	data, err := FS.ReadFile(Standard)
	if err == nil {
		var w *workload.Workload
		if w, err = workload.Load(data, "."); err == nil {
			return w, nil
		}
	}
	return nil, fmt.Errorf("standard workload %s: %w", Standard, err)
}
