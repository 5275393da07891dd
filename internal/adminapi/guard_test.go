package adminapi

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// TestGuardOverLoopback: a browser's cross-site requests (a form or a
// no-cors fetch from another site) that would change state are refused
// with 403 naming why; curl-like clients with a JSON content type or the
// custom header, same-host pages and every read pass.
func TestGuardOverLoopback(t *testing.T) {
	var switched atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("GET /experiments", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "{}") })
	mux.HandleFunc("POST /experiments/{name}/active", func(w http.ResponseWriter, _ *http.Request) { switched.Add(1) })
	mux.HandleFunc("DELETE /experiments/{name}/active", func(w http.ResponseWriter, _ *http.Request) { switched.Add(1) })
	srv := httptest.NewServer(Guard(mux, ""))
	defer srv.Close()
	self := srv.URL // http://127.0.0.1:PORT
	for _, tc := range []struct {
		name, method, path string
		headers            []string
		want               int
		why                string // in the 403's error
	}{
		{"the reported attack: text/plain from another site", "POST", "/experiments/policy-ab/active?arm=fifo",
			[]string{"Content-Type", "text/plain", "Origin", "http://evil.example"}, 403, `Origin "http://evil.example" is not this admin listener`},
		{"a form from another site", "POST", "/experiments/policy-ab/active?arm=fifo",
			[]string{"Content-Type", "application/x-www-form-urlencoded", "Origin", "http://evil.example"}, 403, "Origin"},
		{"JSON from another site", "POST", "/experiments/policy-ab/active",
			[]string{"Content-Type", "application/json", "Origin", "http://evil.example"}, 403, "Origin"},
		{"a sandboxed page", "POST", "/experiments/policy-ab/active",
			[]string{"Content-Type", "application/json", "Origin", "null"}, 403, `Origin "null"`},
		{"same host, other port", "POST", "/experiments/policy-ab/active",
			[]string{"Content-Type", "application/json", "Origin", "http://127.0.0.1:1"}, 403, "Origin"},
		{"referer from another site, no origin", "POST", "/experiments/policy-ab/active",
			[]string{"Content-Type", "application/json", "Referer", "https://evil.example/page"}, 403, "Referer"},
		{"DELETE from another site", "DELETE", "/experiments/policy-ab/active",
			[]string{"Origin", "http://evil.example"}, 403, "Origin"},
		{"no content type, no header", "POST", "/experiments/policy-ab/active?arm=fifo", nil, 403, "needs content-type: application/json or a X-LLMesh-Admin header"},
		{"text/plain without origin", "POST", "/experiments/policy-ab/active?arm=fifo",
			[]string{"Content-Type", "text/plain; charset=utf-8"}, 403, `content type "text/plain; charset=utf-8"`},
		{"multipart", "POST", "/experiments/policy-ab/active",
			[]string{"Content-Type", "multipart/form-data; boundary=x"}, 403, "X-LLMesh-Admin"},
		{"curl with JSON", "POST", "/experiments/policy-ab/active", []string{"Content-Type", "application/json"}, 200, ""},
		{"curl with the header", "POST", "/experiments/policy-ab/active?arm=fifo", []string{"X-LLMesh-Admin", "1"}, 200, ""},
		{"a same-host page", "POST", "/experiments/policy-ab/active",
			[]string{"Content-Type", "application/json", "Origin", self}, 200, ""},
		{"same-host referer", "POST", "/experiments/policy-ab/active?arm=x",
			[]string{"Referer", self + "/ui", "X-LLMesh-Admin", "yes"}, 200, ""},
		{"DELETE without origin", "DELETE", "/experiments/policy-ab/active", nil, 200, ""},
		{"reads pass from anywhere", "GET", "/experiments", []string{"Origin", "http://evil.example"}, 200, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := switched.Load()
			req, err := http.NewRequest(tc.method, self+tc.path, strings.NewReader(`{"arm":"fifo"}`))
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i+1 < len(tc.headers); i += 2 {
				req.Header.Set(tc.headers[i], tc.headers[i+1])
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			var out struct{ Error string }
			_ = json.Unmarshal(body, &out)
			if res.StatusCode != tc.want || !strings.Contains(out.Error, tc.why) {
				t.Fatalf("%d %s, want %d naming %q", res.StatusCode, body, tc.want, tc.why)
			}
			if changed := switched.Load() != before; changed != (tc.want == 200 && tc.method != "GET") {
				t.Errorf("state changed: %v", changed)
			}
		})
	}
}

// FuzzGuard: any method, origin, referer and content type; never a panic,
// a refusal always says why, and a state-changing request passes only
// with a same-host origin (when it names one) and, for POST, a content
// type a browser would preflight or the custom header.
func FuzzGuard(f *testing.F) {
	for _, s := range [][5]string{
		{"POST", "http://evil.example", "", "text/plain", ""},
		{"POST", "", "", "application/json", ""},
		{"POST", "http://admin:9901", "", "application/json", ""},
		{"POST", "", "http://admin:9901/x", "", "1"},
		{"DELETE", "null", "", "", ""},
		{"GET", "http://evil.example", "", "", ""},
		{"POST", "HTTP://ADMIN:9901", "", "Application/JSON; charset=utf-8", ""},
		{"POST", "http://admin", "", "text/plain;", ""},
		{"PUT", "http://[::1]:9901", "", "", ""},
		{"POST", "", "", "application/json;;", ""},
	} {
		f.Add(s[0], s[1], s[2], s[3], s[4])
	}
	f.Fuzz(func(t *testing.T, method, origin, referer, ct, custom string) {
		r := httptest.NewRequest("GET", "http://admin:9901/experiments/x/active", nil)
		r.Method = method
		for k, v := range map[string]string{"Origin": origin, "Referer": referer, "Content-Type": ct, Header: custom} {
			if v != "" {
				r.Header.Set(k, v)
			}
		}
		msg := crossSite(r)
		changes := method != "GET" && method != "HEAD" && method != "OPTIONS"
		if !changes {
			if msg != "" {
				t.Fatalf("a %s refused: %s", method, msg)
			}
			return
		}
		if msg != "" {
			if !strings.Contains(msg, "admin") {
				t.Fatalf("refusal %q does not say what it is", msg)
			}
			return
		}
		if origin != "" && !sameHost(origin, "admin:9901") {
			t.Fatalf("origin %q passed", origin)
		}
		if origin == "" && referer != "" && !sameHost(referer, "admin:9901") {
			t.Fatalf("referer %q passed", referer)
		}
		if method == "POST" && custom == "" && simpleContentType(ct) {
			t.Fatalf("POST with content type %q and no %s passed", ct, Header)
		}
	})
}

// TestGuardToken: with a token, a state-changing request needs it as a
// bearer token (401 otherwise, naming what is missing); reads stay open,
// and the cross-site checks still come first.
func TestGuardToken(t *testing.T) {
	var switched atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) {})
	mux.HandleFunc("POST /experiments/{name}/active", func(w http.ResponseWriter, _ *http.Request) { switched.Add(1) })
	srv := httptest.NewServer(Guard(mux, "s3cret"))
	defer srv.Close()
	for _, tc := range []struct {
		name, method, path, auth, origin string
		want                             int
	}{
		{"no token", "POST", "/experiments/ab/active", "", "", 401},
		{"another token", "POST", "/experiments/ab/active", "Bearer guess", "", 401},
		{"the token without the scheme", "POST", "/experiments/ab/active", "s3cret", "", 401},
		{"the token", "POST", "/experiments/ab/active", "Bearer s3cret", "", 200},
		{"the token from another site", "POST", "/experiments/ab/active", "Bearer s3cret", "http://evil.example", 403},
		{"reads stay open", "GET", "/metrics", "", "", 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := switched.Load()
			req, err := http.NewRequest(tc.method, srv.URL+tc.path, strings.NewReader(`{"arm":"x"}`))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			if tc.origin != "" {
				req.Header.Set("Origin", tc.origin)
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var out struct{ Error string }
			_ = json.NewDecoder(res.Body).Decode(&out)
			res.Body.Close()
			if res.StatusCode != tc.want {
				t.Fatalf("%d %q, want %d", res.StatusCode, out.Error, tc.want)
			}
			if tc.want == 401 && (!strings.Contains(out.Error, "Bearer <token>") || res.Header.Get("WWW-Authenticate") == "") {
				t.Errorf("401 says %q (WWW-Authenticate %q)", out.Error, res.Header.Get("WWW-Authenticate"))
			}
			if changed := switched.Load() != before; changed != (tc.want == 200 && tc.method == "POST") {
				t.Errorf("state changed: %v", changed)
			}
		})
	}
}
