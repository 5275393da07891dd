package control

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/internal/adminapi"
)

// AdminHandler serves the admin API:
//
//	GET  /healthz                            200 "ok"
//	GET  /version                            {"version": ..., "last_error": ..., ...}
//	GET  /config                             the served mesh config as YAML (defaults applied, switches included, secrets redacted)
//	GET  /nodes                              per-node, per-type sent/ACKed/NACKed versions and NACK messages
//	GET  /experiments                        experiments, arms and the active arm
//	POST /experiments/{name}/active          body {"arm": "x"} (or ?arm=x): arm x takes all traffic; "" splits again
//	DELETE /experiments/{name}/active        drop the switch; the file's active field applies
//
// POST and DELETE pass adminapi.Guard: same-host Origin or Referer when
// one is sent, and for POST a JSON content type or the X-LLMesh-Admin
// header.
func (s *Server) AdminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "ok\n") //nolint:errcheck // client gone
	})
	mux.HandleFunc("GET /version", s.handleVersion)
	mux.HandleFunc("GET /config", s.handleConfig)
	mux.HandleFunc("GET /nodes", func(w http.ResponseWriter, _ *http.Request) {
		adminapi.WriteJSON(w, http.StatusOK, map[string]any{"version": s.Version(), "nodes": s.Nodes()})
	})
	// A failed DELETE is a failure to publish, not the client's doing.
	adminapi.RegisterExperiments(mux, s, http.StatusInternalServerError)
	// A cross-site request (as a browser sends it from another site)
	// that would change state is refused with 403.
	return adminapi.Guard(mux, s.opts.AdminToken)
}

// VersionInfo is the body of GET /version.
type VersionInfo struct {
	Version string `json:"version"`
	// LastError is the last rejected config change, "" once a later change
	// was accepted.
	LastError   string     `json:"last_error,omitempty"`
	LastErrorAt *time.Time `json:"last_error_at,omitempty"`
	// Rejected counts rejected changes since start.
	Rejected int `json:"rejected"`
}

func (s *Server) handleVersion(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	vi := VersionInfo{Version: s.version, LastError: s.lastErr, Rejected: s.rejected}
	if s.lastErr != "" {
		t := s.lastErrAt
		vi.LastErrorAt = &t
	}
	s.mu.Unlock()
	adminapi.WriteJSON(w, http.StatusOK, vi)
}

func (s *Server) handleConfig(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	cfg, v := s.cfg, s.version
	s.mu.Unlock()
	b, err := yaml.Marshal(redacted(cfg.Source))
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/yaml")
	w.Header().Set("X-Llmesh-Version", v)
	w.Write(b)
}

// redacted returns a copy of m fit to show on the admin API: every API key
// replaced by its "sha256:<hex>" form (which classifies exactly as the key
// does, so the output still loads and behaves the same) and the trusted
// marker's value replaced by a placeholder. m is not modified.
func redacted(m *config.Mesh) *config.Mesh {
	out := *m
	c := &out.Classification
	if len(c.APIKeys) > 0 {
		keys := make(map[string]string, len(c.APIKeys))
		for k, class := range c.APIKeys {
			if !strings.HasPrefix(k, "sha256:") {
				sum := sha256.Sum256([]byte(k))
				k = "sha256:" + hex.EncodeToString(sum[:])
			}
			keys[k] = class
		}
		c.APIKeys = keys
	}
	if tm := c.PriorityHeader.TrustedMarker; tm != nil {
		c.PriorityHeader.TrustedMarker = &config.TrustedMarkerSpec{Header: tm.Header, Value: redactedValue}
	}
	return &out
}

// redactedValue stands in for a secret in GET /config.
const redactedValue = "REDACTED"

// ExperimentInfo is one entry of GET /experiments.
type ExperimentInfo = adminapi.ExperimentInfo

// ExperimentList describes every experiment of the served config
// (adminapi.ArmSwitcher).
func (s *Server) ExperimentList() (version string, list []adminapi.ExperimentInfo) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.version, adminapi.Experiments(s.cfg, s.overrides)
}
