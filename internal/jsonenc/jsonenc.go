// Package jsonenc appends JSON strings to byte slices without reflection,
// for the hot paths that write JSON by hand (the simulated engine's SSE
// events, the benchmark client's request bodies).
package jsonenc

import (
	"encoding/json"
	"unicode/utf8"
)

// AppendString appends s as a JSON string exactly as encoding/json writes
// it: printable ASCII other than the characters it escapes goes through as
// is; anything else takes encoding/json's own path.
func AppendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, err := json.Marshal(s)
			if err != nil { // cannot happen for a string
				return append(b, `""`...)
			}
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
