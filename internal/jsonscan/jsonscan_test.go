package jsonscan

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzValid holds Valid to json.Valid's answer, and Value under a smaller
// depth limit to the same answer wherever the input nests no deeper.
func FuzzValid(f *testing.F) {
	for _, s := range []string{
		``, ` `, `{}`, `[]`, `{ }`, `[ ]`, `null`, `true`, `false`, `nul`, `truex`, `tru`, `0`, `-0`, `01`, `-`, `-0.`,
		`1.`, `1e`, `1e+`, `1.5e`, `1.5e+3`, `-12.34E-5`, `"a\u00e9\"\\\/\b\f\n\r\t"`, `"\u12g4"`, `"a\u12"`,
		`"\ud83d\ude00"`, `"\x"`, "\"a\x01\"", "\"1234567\x01\"", "\"\xff\xfe\"", `"12345678\"12345678"`, `"abc\\\\"`,
		`{"a":1,}`, `[1,]`, `[1 2]`, `{"a" 1}`, `{"a"}`, `{"a":}`, `{1:2}`, `{"a":[{"b":null}],"c":{"d":[true,false,-1e9]}}`,
		` {"choices":[{"text":" a"}]} `, `{"a":1}x`, `[[[]]]`, `[[[]]`, `"unterminated`,
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,"max_tokens":64}`,
	} {
		f.Add(s)
	}
	const shallow = 8
	f.Fuzz(func(t *testing.T, s string) {
		b := []byte(s)
		want := json.Valid(b)
		if got := Valid(b); got != want {
			t.Fatalf("Valid(%q) = %v, json.Valid says %v", s, got, want)
		}
		end, ok := Value(b, Space(b, 0), shallow)
		got := ok && Space(b, end) == len(b)
		if got && !want || !got && want && strings.Count(s, "[")+strings.Count(s, "{") <= shallow {
			t.Fatalf("Value(%q, depth %d) accepts %v, json.Valid %v", s, shallow, got, want)
		}
		if walked, ok := walk(b); ok && walked != want {
			t.Fatalf("a walk with Enter, Member and Next accepts %q: %v, json.Valid %v", s, walked, want)
		}
	})
}

// walk validates a top-level object or array member by member, as the
// callers of Enter, Member and Next do; ok is false for other values.
func walk(b []byte) (valid, ok bool) {
	i := Space(b, 0)
	if i >= len(b) || b[i] != '{' && b[i] != '[' {
		return false, false
	}
	closer := byte(']')
	if b[i] == '{' {
		closer = '}'
	}
	i, empty := Enter(b, i)
	for more := !empty; more; {
		v := i
		if closer == '}' {
			if _, _, v, ok = Member(b, i); !ok {
				return false, true
			}
		}
		end, ok := Value(b, v, MaxDepth-1)
		if !ok {
			return false, true
		}
		if i, more, ok = Next(b, end, closer); !ok {
			return false, true
		}
	}
	return i < len(b) && Space(b, i+1) == len(b), true
}

// The nesting limit is encoding/json's, empty containers included.
func TestValidDepth(t *testing.T) {
	for _, n := range []int{MaxDepth - 1, MaxDepth, MaxDepth + 1} {
		for _, doc := range []string{strings.Repeat("[", n) + strings.Repeat("]", n), strings.Repeat(`{"a":`, n-1) + "{}" + strings.Repeat("}", n-1)} {
			if got, want := Valid([]byte(doc)), json.Valid([]byte(doc)); got != want {
				t.Errorf("depth %d (%.8s…): Valid %v, json.Valid %v", n, doc, got, want)
			}
		}
	}
}

// BenchmarkValid compares Valid with json.Valid on a sim token chunk and
// on a request with an 8 KiB prompt.
func BenchmarkValid(b *testing.B) {
	for _, tc := range []struct{ name, doc string }{
		{"chunk", `{"id":"cmpl-6b0caa13-1","object":"text_completion","created":1795992179,"model":"llama3-8b-h200","choices":[{"index":0,"text":" lisiko","logprobs":null,"finish_reason":null}]}`},
		{"request-8KiB", `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("lorem ipsum ", 683) + `"}],"stream":true}`},
	} {
		doc := []byte(tc.doc)
		b.Run(tc.name+"/Valid", func(b *testing.B) {
			b.SetBytes(int64(len(doc)))
			for b.Loop() {
				if !Valid(doc) {
					b.Fatal("invalid")
				}
			}
		})
		b.Run(tc.name+"/json.Valid", func(b *testing.B) {
			b.SetBytes(int64(len(doc)))
			for b.Loop() {
				if !json.Valid(doc) {
					b.Fatal("invalid")
				}
			}
		})
	}
}

// FuzzKeyEquals holds KeyEquals to encoding/json's reading of the name
// (for names that are UTF-8 without U+FFFD, see KeyEquals).
func FuzzKeyEquals(f *testing.F) {
	for _, s := range [][2]string{
		{`"priority"`, "priority"}, {`"priorit\u0079"`, "priority"}, {`"pri\"ority"`, `pri"ority`},
		{`"Priority"`, "priority"}, {`"a\/b"`, "a/b"}, {`"\ud83d\ude00"`, "\U0001F600"}, {`"\ud83d"`, "?"},
		{`""`, ""}, {`"x"`, ""}, {"\"\xff\"", "\xff"}, {`"\u00e9t\u00e9"`, "été"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, quoted, name string) {
		b := []byte(quoted)
		end, escaped, ok := String(b, 0)
		if len(b) == 0 || b[0] != '"' || !ok || end != len(b) || strings.ContainsRune(name, utf8.RuneError) {
			return
		}
		var want string
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatalf("json.Unmarshal(%q): %v after String accepted it", quoted, err)
		}
		if got := KeyEquals(b, escaped, name); got != (want == name) {
			t.Fatalf("KeyEquals(%q, %q) = %v, encoding/json reads %q", quoted, name, got, want)
		}
	})
}

// FuzzKeyEqualFold holds KeyEqualFold to encoding/json's field matching: a
// member name is the name when it fills a struct field tagged with it.
func FuzzKeyEqualFold(f *testing.F) {
	for _, s := range []string{
		`"priority"`, `"PRIORITY"`, `"Priority"`, `"pRiOrItY"`, `"PRIORIT\u0059"`, `"\u0050riority"`,
		`"priorit"`, `"priority "`, `"prio\u0000rity"`, "\"\xff\"", `"\u212a"`, `"\u017f"`, `""`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, quoted string) {
		b := []byte(quoted)
		end, escaped, ok := String(b, 0)
		if len(b) == 0 || b[0] != '"' || !ok || end != len(b) {
			return
		}
		var v struct {
			P *json.RawMessage `json:"priority"`
		}
		if err := json.Unmarshal([]byte("{"+quoted+":1}"), &v); err != nil {
			t.Fatalf("json.Unmarshal of a member named %s: %v", quoted, err)
		}
		if got, want := KeyEqualFold(b, escaped, "priority"), v.P != nil; got != want {
			t.Fatalf("KeyEqualFold(%s, priority) = %v, encoding/json fills the field: %v", quoted, got, want)
		}
	})
}
