package main

import (
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/llmesh/llmesh/internal/adminapi"
)

// TestAdminTokenFromEnv: `llmesh control` and `llmesh gateway` read the
// admin token from LLMESH_ADMIN_TOKEN; their admin listeners then refuse a
// switch without it (401) and apply one with it, and a cross-site switch
// is refused (403) with or without a token.
func TestAdminTokenFromEnv(t *testing.T) {
	for _, tc := range []struct {
		name  string
		args  []string
		ready *regexp.Regexp
	}{
		{"control", []string{"control", "--config", "../../examples/mesh.yaml", "--xds", "127.0.0.1:0", "--admin", "127.0.0.1:0"},
			regexp.MustCompile(`admin on (http://127\.0\.0\.1:\d+)`)},
		{"gateway", []string{"gateway", "--config", "../../examples/mesh.yaml", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"},
			regexp.MustCompile(`gateway listening on 127\.0\.0\.1:\d+ \(admin (127\.0\.0\.1:\d+)\)`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(adminapi.TokenEnv, "s3cret") // inherited by the process
			p, _ := startLLMesh(t, tc.args...)
			admin := p.WaitOutput(t, tc.ready)[1]
			if !strings.HasPrefix(admin, "http://") {
				admin = "http://" + admin
			}
			post := func(auth, origin string) int {
				t.Helper()
				req, err := http.NewRequest(http.MethodPost, admin+"/experiments/policy-ab/active", strings.NewReader(`{"arm":"fifo"}`))
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("Content-Type", "application/json")
				if auth != "" {
					req.Header.Set("Authorization", auth)
				}
				if origin != "" {
					req.Header.Set("Origin", origin)
				}
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				res.Body.Close()
				return res.StatusCode
			}
			if code := post("", ""); code != http.StatusUnauthorized {
				t.Errorf("switch without the token: %d, want 401", code)
			}
			if code := post("Bearer s3cret", "http://evil.example"); code != http.StatusForbidden {
				t.Errorf("cross-site switch with the token: %d, want 403", code)
			}
			if code := post("Bearer s3cret", ""); code != http.StatusOK {
				t.Errorf("switch with the token: %d, want 200", code)
			}
		})
	}
}
