package client

import (
	"encoding/json"
	"strings"
	"testing"
)

// FuzzValidJSON holds validJSON to json.Valid's answer.
func FuzzValidJSON(f *testing.F) {
	for _, s := range []string{
		``, ` `, `{}`, `[]`, `{ }`, `[ ]`, `null`, `true`, `false`, `nul`, `truex`, `0`, `-0`, `01`, `-`, `1.`, `1.5e`,
		`1.5e+3`, `-12.34E-5`, `"a\u00e9\"\\\/\b\f\n\r\t"`, `"\u12g4"`, `"\x"`, "\"a\x01\"", "\"\xff\xfe\"",
		`{"a":1,}`, `[1,]`, `[1 2]`, `{"a" 1}`, `{"a":}`, `{1:2}`, `{"a":[{"b":null}],"c":{"d":[true,false,-1e9]}}`,
		` {"choices":[{"text":" a"}]} `, `{"a":1}x`, `[[[]]]`, `[[[]]`, `"unterminated`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := validJSON([]byte(s)), json.Valid([]byte(s)); got != want {
			t.Fatalf("validJSON(%q) = %v, json.Valid says %v", s, got, want)
		}
	})
}

// The nesting limit is encoding/json's, empty containers included.
func TestValidJSONDepth(t *testing.T) {
	for _, n := range []int{maxNestingDepth - 1, maxNestingDepth, maxNestingDepth + 1} {
		for _, doc := range []string{strings.Repeat("[", n) + strings.Repeat("]", n), strings.Repeat(`{"a":`, n-1) + "{}" + strings.Repeat("}", n-1)} {
			if got, want := validJSON([]byte(doc)), json.Valid([]byte(doc)); got != want {
				t.Errorf("depth %d (%.8s…): validJSON %v, json.Valid %v", n, doc, got, want)
			}
		}
	}
}

// BenchmarkValidJSON compares validJSON with json.Valid on a sim token
// chunk.
func BenchmarkValidJSON(b *testing.B) {
	ev := []byte(`{"id":"cmpl-6b0caa13-1","object":"text_completion","created":1795992179,"model":"llama3-8b-h200","choices":[{"index":0,"text":" lisiko","logprobs":null,"finish_reason":null}]}`)
	b.Run("validJSON", func(b *testing.B) {
		b.SetBytes(int64(len(ev)))
		for b.Loop() {
			if !validJSON(ev) {
				b.Fatal("invalid")
			}
		}
	})
	b.Run("json.Valid", func(b *testing.B) {
		b.SetBytes(int64(len(ev)))
		for b.Loop() {
			if !json.Valid(ev) {
				b.Fatal("invalid")
			}
		}
	})
}
