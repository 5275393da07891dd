// Package editdist is the edit distance behind llmesh's "did you mean"
// suggestions (mesh fields and values in config, command-line flags).
package editdist

// Levenshtein is the Levenshtein distance of a and b, capped at 64 for
// inputs longer than 64 bytes: suggestions only care about small distances.
func Levenshtein(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 64
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
