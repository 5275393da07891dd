package jsonscan

import (
	"encoding/json"
	"testing"
	"unicode/utf8"
)

func TestClosingQuote(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
	}{
		{`abc"rest`, 3},
		{`"`, 0},
		{`a\"b"`, 4},
		{`a\\"b"`, 3},
		{`a\\\"b"`, 6},
		{`\\\\"`, 4},
		{`no quote`, -1},
		{`trailing\"`, -1},
	} {
		if got := ClosingQuote([]byte(tc.in)); got != tc.want {
			t.Errorf("ClosingQuote(%q) = %d, want %d", tc.in, got, tc.want)
		}
	}
}

// FuzzUnescape checks AppendUnescaped (the observer's kept output) against
// encoding/json on every valid UTF-8 string literal.
func FuzzUnescape(f *testing.F) {
	for _, s := range []string{`"plain"`, `"a\u00e9\n\t\"\\\/"`, `"\ud83d\ude00"`, `"\ud83d x"`, `"\udc00\ud800"`, `"\u12"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, lit []byte) {
		var want string
		if !utf8.Valid(lit) || json.Unmarshal(lit, &want) != nil {
			return
		}
		s := NewLenient(lit)
		raw, _ := s.Str()
		if s.Bad() {
			t.Fatalf("scanner rejected valid literal %q", lit)
		}
		if got := string(AppendUnescaped(nil, raw)); got != want {
			t.Fatalf("unescape(%q) = %q, want %q", lit, got, want)
		}
	})
}
