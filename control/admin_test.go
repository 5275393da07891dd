package control

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/exchange"
)

// TestAdminConfigRedactsSecrets: GET /config shows neither API keys nor the
// trusted marker's value, and what it shows still loads and classifies API
// keys as the file does.
func TestAdminConfigRedactsSecrets(t *testing.T) {
	const key, marker = "sk-live-4f1d9c", "edge-secret-77aa"
	src := `
listeners: [{name: main, address: "127.0.0.1:0", routes: [{pool: gpu}]}]
pools: [{name: gpu, protocol: openai, endpoints: ["127.0.0.1:9000"]}]
classes: [{name: interactive, priority: 0}, {name: batch, priority: 10}]
default_class: batch
classification:
  api_keys: {` + key + `: interactive}
  priority_header:
    name: x-llmesh-class
    trusted_marker: {header: x-edge-verified, value: ` + marker + `}
`
	srv, err := New(loadYAML(t, src), Options{})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	srv.AdminHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/config", nil))
	body := rec.Body.String()
	if rec.Code != 200 || strings.Contains(body, key) || strings.Contains(body, marker) {
		t.Fatalf("/config (%d) shows a secret:\n%s", rec.Code, body)
	}
	shown, err := config.Load([]byte(body))
	if err != nil {
		t.Fatalf("/config output does not load back: %v", err)
	}
	cls, err := exchange.NewClassifierFromConfig(shown)
	if err != nil {
		t.Fatal(err)
	}
	got := cls.Classify(exchange.RequestInfo{Headers: exchange.MapHeaders{"authorization": "Bearer " + key}})
	if got.Name != "interactive" || got.Source != exchange.SourceAPIKey {
		t.Errorf("the shown config classifies the API key as %q by %v", got.Name, got.Source)
	}
	if k := srv.Config().Source.Classification.APIKeys; k[key] != "interactive" {
		t.Errorf("redaction changed the served config: %v", k)
	}
	if tm := srv.Config().Source.Classification.PriorityHeader.TrustedMarker; tm.Value != marker {
		t.Error("redaction changed the served config's marker")
	}
}
