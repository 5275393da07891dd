package jsonscan

import (
	"math"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"a":1}`, ""},
		{`{"a":1,}`, "invalid JSON at byte 7: expected a member name"},
		{`NaN`, `invalid JSON at byte 0: unexpected character 'N'`},
		{`[-Infinity]`, "invalid JSON at byte 1: invalid number"},
		{`{"a":[1,2`, "invalid JSON at byte 9: unterminated array"},
		{`{"a":"x`, "invalid JSON at byte 5: unterminated string"},
		{`{"a\x":1}`, `invalid JSON at byte 3: invalid escape \x`},
		{`"\u12"`, `invalid JSON at byte 1: \u must be followed by four hex digits`},
		{"\"" + strings.Repeat("x", 20) + "\n\"", "invalid JSON at byte 21: control character 0x0a in a string"},
		{`[tru]`, "invalid JSON at byte 1: invalid literal"},
		{`{"a" 1}`, "invalid JSON at byte 5: expected ':' after a member name"},
		{`[1 2]`, "invalid JSON at byte 3: expected ',' or the end of the array"},
		{`[[[]]]`, "invalid JSON at byte 2: nested deeper than 2 levels"},
		{strings.Repeat("[", 100000), "invalid JSON at byte 100000: unexpected end of input, expected a value"},
	} {
		_, err := Check([]byte(tc.in), 0, 2)
		if tc.in[0] == '[' && strings.Count(tc.in, "[") > 3 {
			_, err = Check([]byte(tc.in), 0, math.MaxInt)
		}
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tc.want {
			t.Errorf("Check(%.40q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// FuzzCheck holds Check to Value: the same verdict and end, and a reason
// for every refusal that lies in the input and is not one of the
// disagreement fallbacks.
func FuzzCheck(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"a":[1,{"b":"c\n"}],"d":-1.5e3}`, `{"a":1,}`, `[1 2]`, `{"a" 1}`, `"\u12"`, "\"a\x01\"", `[tru]`,
		`[[[[[]]]]]`, `{"a":{"b":{"c":[]}}}`, `-`, `01`, `"\x"`, `[`, `{"a":"x`, ` 1`,
	} {
		f.Add(s, 3)
	}
	f.Fuzz(func(t *testing.T, s string, depth int) {
		if depth < 0 || depth > 64 {
			return
		}
		b := []byte(s)
		wantEnd, ok := Value(b, 0, depth)
		end, err := Check(b, 0, depth)
		if ok != (err == nil) || ok && end != wantEnd {
			t.Fatalf("Check(%q, %d) = %d, %v; Value says %d, %v", s, depth, end, err, wantEnd, ok)
		}
		if err == nil {
			return
		}
		if err.Offset < 0 || err.Offset > len(b) || err.Msg == "invalid value" || err.Msg == "invalid string" {
			t.Fatalf("Check(%q, %d): %v", s, depth, err)
		}
	})
}
