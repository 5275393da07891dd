package jsonenc

import (
	"bytes"
	"encoding/json"
	"testing"
)

// FuzzAppendString holds AppendString to encoding/json byte for byte, and
// checks that it appends rather than overwrites.
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", " the of", `"\`, "<>&", "\x00\n\t", "é", "\u2028\u2029", "\xff\xfe", "a\x7fb", "llmesh-sim"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := AppendString([]byte("x"), s); !bytes.Equal(got[1:], want) || got[0] != 'x' {
			t.Fatalf("AppendString(%q) = %s, want %s", s, got[1:], want)
		}
	})
}
