package config

import (
	"fmt"
	"strings"

	"github.com/llmesh/llmesh/internal/editdist"
)

// suggestValue names the closest of the known values to got, or lists
// them, as suggest does for field names.
func suggestValue(got string, known []string) string {
	best, bestD := "", 3
	for _, n := range known {
		if d := editdist.Levenshtein(strings.ToLower(got), n); d < bestD {
			best, bestD = n, d
		}
	}
	if best != "" {
		return fmt.Sprintf(" (did you mean %q?)", best)
	}
	return fmt.Sprintf(" (known: %s)", strings.Join(known, ", "))
}
