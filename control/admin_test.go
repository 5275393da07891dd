package control

import (
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzArmFromRequest: any body or query gives an arm or a clear error,
// never a panic; a JSON body with an arm field round-trips.
func FuzzArmFromRequest(f *testing.F) {
	for _, s := range []string{`{"arm": "fifo"}`, `{"arm": ""}`, `{}`, `{"arm": 1}`, `[`, `{"arm": "a", "x": 1}`, ""} {
		f.Add(s, "")
	}
	f.Add("", "arm=x")
	f.Add("", "arm=%zz")
	f.Fuzz(func(t *testing.T, body, query string) {
		r := httptest.NewRequest("POST", "/experiments/e/active", strings.NewReader(body))
		r.URL.RawQuery = query
		arm, err := armFromRequest(r)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		if !r.URL.Query().Has("arm") && !strings.Contains(body, "arm") {
			t.Fatalf("arm %q from a body without one: %q", arm, body)
		}
	})
}
