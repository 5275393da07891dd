package exchange

import (
	"crypto/sha256"
	"encoding/hex"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/llmesh/llmesh/config"
)

func testClassifier(t *testing.T) *Classifier {
	t.Helper()
	sum := sha256.Sum256([]byte("hashed-key"))
	c, err := NewClassifier(ClassifierConfig{
		Classes: []Class{
			{Name: "batch", Priority: 10, Preemptible: true},
			{Name: "interactive", Priority: 0, TTFT: 200 * time.Millisecond, TPOT: 50 * time.Millisecond},
			{Name: "standard", Priority: 5, TTFT: time.Second},
		},
		DefaultClass:        "standard",
		Rules:               []Rule{{PathPrefix: "/v1/completions", Model: "tiny", Class: "batch"}, {Model: "chat-fast", Class: "interactive"}},
		TenantHeader:        "X-Tenant-ID",
		Tenants:             map[string]string{"acme": "interactive", "bulk-co": "batch"},
		APIKeys:             map[string]string{"sk-gold": "interactive", "sha256:" + hex.EncodeToString(sum[:]): "batch"},
		PriorityHeader:      "x-llmesh-class",
		TrustedSources:      []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")},
		TrustedMarkerHeader: "x-llmesh-trusted",
		TrustedMarkerValue:  "s3cret",
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestClassify(t *testing.T) {
	c := testClassifier(t)
	trusted := netip.MustParseAddr("10.1.2.3")
	untrusted := netip.MustParseAddr("192.0.2.1")
	tests := []struct {
		name       string
		in         RequestInfo
		wantClass  string
		wantSource Source
		reason     string
	}{
		{"default", RequestInfo{Path: "/v1/chat/completions"}, "standard", SourceDefault, "default class"},
		{"route wins", RequestInfo{RouteClass: "batch", Headers: MapHeaders{"authorization": "Bearer sk-gold"}}, "batch", SourceRoute, "route class"},
		{"unknown route class falls through", RequestInfo{RouteClass: "nope"}, "standard", SourceDefault, `route class "nope" unknown`},
		{"api key", RequestInfo{Headers: MapHeaders{"authorization": "Bearer sk-gold", "x-tenant-id": "bulk-co"}}, "interactive", SourceAPIKey, "API key"},
		{"hashed api key", RequestInfo{Headers: MapHeaders{"authorization": "bearer hashed-key"}}, "batch", SourceAPIKey, "API key"},
		{"unknown key then tenant", RequestInfo{Headers: MapHeaders{"authorization": "Bearer sk-other", "x-tenant-id": "acme"}}, "interactive", SourceTenant, "API key not mapped"},
		{"header from trusted cidr", RequestInfo{Peer: trusted, Headers: MapHeaders{"x-llmesh-class": "interactive"}}, "interactive", SourceHeader, "trusted"},
		{"header from v4-mapped trusted", RequestInfo{Peer: netip.MustParseAddr("::ffff:10.0.0.1"), Headers: MapHeaders{"x-llmesh-class": "batch"}}, "batch", SourceHeader, "trusted"},
		{"header spoofed", RequestInfo{Peer: untrusted, Headers: MapHeaders{"x-llmesh-class": "interactive"}}, "standard", SourceDefault, "ignored from untrusted peer 192.0.2.1"},
		{"header with marker", RequestInfo{Peer: untrusted, Headers: MapHeaders{"x-llmesh-class": "interactive", "x-llmesh-trusted": "s3cret"}}, "interactive", SourceHeader, "trusted"},
		{"header with wrong marker", RequestInfo{Peer: untrusted, Headers: MapHeaders{"x-llmesh-class": "interactive", "x-llmesh-trusted": "guess"}}, "standard", SourceDefault, "untrusted"},
		{"numeric priority", RequestInfo{Peer: trusted, Headers: MapHeaders{"x-llmesh-class": "3"}}, "standard", SourceHeader, "trusted"},
		{"numeric beyond all", RequestInfo{Peer: trusted, Headers: MapHeaders{"x-llmesh-class": "99"}}, "standard", SourceDefault, "names no class"},
		{"unknown claim", RequestInfo{Peer: trusted, Headers: MapHeaders{"x-llmesh-class": "platinum"}}, "standard", SourceDefault, "names no class"},
		{"rule path+model", RequestInfo{Path: "/v1/completions", Model: "tiny"}, "batch", SourceRule, "rule 0"},
		{"rule model only", RequestInfo{Path: "/v1/chat/completions", Model: "chat-fast"}, "interactive", SourceRule, "rule 1"},
		{"rule path mismatch", RequestInfo{Path: "/v1/chat/completions", Model: "tiny"}, "standard", SourceDefault, "default"},
		{"tenant beats trusted header", RequestInfo{Peer: trusted, Headers: MapHeaders{"x-tenant-id": "bulk-co", "x-llmesh-class": "interactive"}}, "batch", SourceTenant, "tenant"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := c.Classify(tc.in)
			if got.Name != tc.wantClass || got.Source != tc.wantSource || !strings.Contains(got.Reason, tc.reason) {
				t.Errorf("got %s via %v (%q), want %s via %v containing %q", got.Name, got.Source, got.Reason, tc.wantClass, tc.wantSource, tc.reason)
			}
			if strings.Contains(got.Reason, "sk-") || strings.Contains(got.Reason, "hashed-key") || strings.Contains(got.Reason, "s3cret") {
				t.Errorf("reason leaks a secret: %q", got.Reason)
			}
		})
	}
	if got := c.Classes(); len(got) != 3 || got[0].Name != "batch" || got[2].Name != "standard" {
		t.Errorf("Classes() = %+v", got)
	}
	if got := c.Classify(RequestInfo{Path: "/x"}); got.TTFT != time.Second || got.Priority != 5 {
		t.Errorf("SLOs not carried: %+v", got)
	}
}

func TestNewClassifierErrors(t *testing.T) {
	_, err := NewClassifier(ClassifierConfig{
		Classes:             []Class{{Name: "a"}, {Name: "a"}, {}},
		DefaultClass:        "zz",
		Rules:               []Rule{{Class: "nope"}},
		Tenants:             map[string]string{"t": "missing"},
		APIKeys:             map[string]string{"sha256:abc": "a", "secret-key": "ghost"},
		TrustedMarkerHeader: "x-m",
	})
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{
		`classes[1].name: "a" is defined twice`, "classes[2].name: is required", `default_class: "zz" is not a defined class`,
		`rules[0].class: "nope"`, `tenants["t"]: "missing"`, "tenant_header: is required", `64 hex digits`,
		`maps to "ghost"`, "trusted_marker_value: is required",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), "secret-key") {
		t.Errorf("error leaks an API key: %v", err)
	}
	if _, err := NewClassifier(ClassifierConfig{}); err == nil || !strings.Contains(err.Error(), "at least one class") {
		t.Errorf("empty config: %v", err)
	}
}

func TestNewClassifierFromConfig(t *testing.T) {
	cfg, err := config.Load([]byte(`
classes:
  - {name: interactive, priority: 0, slo: {ttft: 250ms, tpot: 40ms}}
  - {name: batch, priority: 10, preemptible: true}
default_class: batch
classification:
  rules:
    - {model: fast, class: interactive}
  tenants: {acme: interactive}
  api_keys: {sk-1: interactive}
  priority_header:
    name: x-llmesh-class
    trusted_sources: ["127.0.0.1/32"]
    trusted_marker: {header: X-Edge-Verified, value: edge-7f0c}
`))
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewClassifierFromConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lo := netip.MustParseAddr("127.0.0.1")
	got := []string{
		c.Classify(RequestInfo{Model: "fast"}).Name,
		c.Classify(RequestInfo{Headers: MapHeaders{"x-tenant-id": "acme"}}).Name,
		c.Classify(RequestInfo{Headers: MapHeaders{"authorization": "Bearer sk-1"}}).Name,
		c.Classify(RequestInfo{Peer: lo, Headers: MapHeaders{"x-llmesh-class": "interactive"}}).Name,
		c.Classify(RequestInfo{Peer: netip.MustParseAddr("127.0.0.2"), Headers: MapHeaders{"x-llmesh-class": "interactive"}}).Name,
		c.Classify(RequestInfo{}).Name,
		// The marker from the mesh file vouches for the header whatever the
		// peer; a wrong or partial marker does not.
		c.Classify(RequestInfo{Peer: netip.MustParseAddr("192.0.2.1"), Headers: MapHeaders{"x-llmesh-class": "interactive", "x-edge-verified": "edge-7f0c"}}).Name,
		c.Classify(RequestInfo{Peer: netip.MustParseAddr("192.0.2.1"), Headers: MapHeaders{"x-llmesh-class": "interactive", "x-edge-verified": "edge-7f0"}}).Name,
		c.Classify(RequestInfo{Headers: MapHeaders{"x-llmesh-class": "interactive", "x-edge-verified": "EDGE-7F0C"}}).Name,
	}
	want := []string{"interactive", "interactive", "interactive", "interactive", "batch", "batch", "interactive", "batch", "batch"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("classes (-want +got):\n%s", diff)
	}
	if cl, _ := c.Class("interactive"); cl.TTFT != 250*time.Millisecond || cl.TPOT != 40*time.Millisecond {
		t.Errorf("SLOs %+v", cl)
	}
	if _, err := NewClassifierFromConfig(nil); err == nil {
		t.Error("nil config accepted")
	}
}

// FuzzClassify: any header values from an untrusted peer never select a
// class through the priority header, and classification never panics.
func FuzzClassify(f *testing.F) {
	f.Add("interactive", "Bearer sk-gold", "acme", "/v1/completions", "tiny", "")
	f.Add("-5", "bearer ", "", "", "", "s3cret")
	f.Add("99999999999999999999", "Bearer sha256:00", "bulk-co", "/", "chat-fast", "s3cre")
	f.Fuzz(func(t *testing.T, claim, auth, tenant, path, model, marker string) {
		c := testClassifier(t)
		h := MapHeaders{"x-llmesh-class": claim, "authorization": auth, "x-tenant-id": tenant, "x-llmesh-trusted": marker}
		got := c.Classify(RequestInfo{Path: path, Model: model, Peer: netip.MustParseAddr("192.0.2.7"), Headers: h})
		if got.Source == SourceHeader && marker != "s3cret" {
			t.Fatalf("untrusted peer picked %s via the header (%s)", got.Name, got.Reason)
		}
		if _, ok := c.Class(got.Name); !ok {
			t.Fatalf("unknown class %q", got.Name)
		}
		others := claim + "\x00" + tenant + "\x00" + path + "\x00" + model
		if len(auth) > 8 && strings.Contains(got.Reason, auth) && !strings.Contains(others, auth) {
			t.Fatalf("reason leaks the API key: %q", got.Reason)
		}
	})
}
