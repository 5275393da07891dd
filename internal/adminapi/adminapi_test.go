package adminapi

import (
	"encoding/json"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// FuzzArmFromRequest: any admin body or query gives an arm or an error
// that says what the body must be, never a panic; an accepted body really
// named that arm, and a query's arm wins over the body.
func FuzzArmFromRequest(f *testing.F) {
	for _, seed := range []struct{ query, body string }{
		{"", `{"arm":"prio"}`},
		{"", `{"arm":""}`},
		{"arm=fifo", ``},
		{"", `{}`},
		{"", `{"am":"x"}`},
		{"", `{"arm": 1}`},
		{"", `{"arm": "a", "x": 1}`},
		{"", `{"arm":"a"}{"arm":"b"}`},
		{"", `[`},
		{"", ``},
		{"", `{"arm":null}`},
		{"arm=", `{"arm":"ignored"}`},
		{"arm=%zz", ``},
		{"", strings.Repeat(" ", 5000) + `{"arm":"far"}`},
	} {
		f.Add(seed.query, seed.body)
	}
	f.Fuzz(func(t *testing.T, query, body string) {
		r := httptest.NewRequest("POST", "/experiments/ab/active", strings.NewReader(body))
		r.URL.RawQuery = query
		arm, err := ArmFromRequest(r)
		if err != nil {
			if msg := err.Error(); !strings.HasPrefix(msg, "body must be") && !strings.HasPrefix(msg, "arm: required") {
				t.Fatalf("error %q says neither what the body must be nor what is missing", msg)
			}
			return
		}
		if q, _ := url.ParseQuery(query); q.Has("arm") { // what URL.Query sees, parse errors and all
			if arm != q.Get("arm") {
				t.Fatalf("query %q gave arm %q", query, arm)
			}
			return
		}
		var first struct {
			Arm *string `json:"arm"`
		}
		if err := json.NewDecoder(strings.NewReader(body)).Decode(&first); err != nil || first.Arm == nil || *first.Arm != arm {
			t.Fatalf("body %q accepted as arm %q, but its first JSON value says %v (%v)", body, arm, first.Arm, err)
		}
	})
}

func TestWriteJSON(t *testing.T) {
	w := httptest.NewRecorder()
	WriteJSON(w, 400, map[string]string{"error": "x"})
	if w.Code != 400 || w.Header().Get("Content-Type") != "application/json" || !strings.Contains(w.Body.String(), `"error": "x"`) {
		t.Fatalf("got %d %q %q", w.Code, w.Header().Get("Content-Type"), w.Body.String())
	}
}
