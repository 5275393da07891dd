package identity

import (
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func sum(tok string) string {
	s := sha256.Sum256([]byte(tok))
	return "sha256:" + hex.EncodeToString(s[:])
}

const sample = `
identities:
  - name: gw-a
    certificates: [gw-a.mesh, "spiffe://mesh/gw-a"]
    classes: [interactive]
    pools: [chat]
    max_leases: 8
    max_queued: 4
    max_sessions: 2
  - name: batch-job
    tokens: ["` + "TOKSUM" + `"]
    token_files: [job.token]
    classes: [batch]
default:
  classes: [batch]
  max_leases: 1
`

func parseSample(t *testing.T) *Set {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "job.token"), []byte("file-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "ids.yaml")
	if err := os.WriteFile(path, []byte(strings.Replace(sample, "TOKSUM", sum("inline-token"), 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestResolve(t *testing.T) {
	s := parseSample(t)
	spiffe, _ := url.Parse("spiffe://mesh/gw-a")
	for _, tc := range []struct {
		name  string
		cert  *x509.Certificate
		token string
		want  string
		err   error
	}{
		{"CN", &x509.Certificate{Subject: pkix.Name{CommonName: "gw-a.mesh"}}, "", "gw-a", nil},
		{"URI SAN", &x509.Certificate{Subject: pkix.Name{CommonName: "other"}, URIs: []*url.URL{spiffe}}, "", "gw-a", nil},
		{"inline token", nil, "inline-token", "batch-job", nil},
		{"token file", nil, "file-token", "batch-job", nil},
		{"token wins over certificate", &x509.Certificate{Subject: pkix.Name{CommonName: "gw-a.mesh"}}, "file-token", "batch-job", nil},
		{"unknown certificate", &x509.Certificate{Subject: pkix.Name{CommonName: "stranger"}}, "", "default", nil},
		{"nothing", nil, "", "default", nil},
		{"unknown token", nil, "guess", "", ErrUnknownToken},
	} {
		id, err := s.Resolve(tc.cert, tc.token)
		if !errors.Is(err, tc.err) {
			t.Errorf("%s: error %v, want %v", tc.name, err, tc.err)
			continue
		}
		if err == nil && id.Name != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, id.Name, tc.want)
		}
	}
	gw, _ := s.Resolve(&x509.Certificate{Subject: pkix.Name{CommonName: "gw-a.mesh"}}, "")
	if !gw.AllowsClass("interactive") || gw.AllowsClass("batch") || !gw.AllowsPool("chat") || gw.AllowsPool("code") {
		t.Errorf("gw-a's classes and pools: %+v", gw)
	}
	if gw.MaxLeases != 8 || gw.MaxQueued != 4 || gw.MaxSessions != 2 {
		t.Errorf("gw-a's limits: %+v", gw)
	}
	job, _ := s.Resolve(nil, "inline-token")
	if !job.AllowsPool("anything") {
		t.Error("an identity without pools may use every pool")
	}
}

func TestNoDefaultRefusesStrangers(t *testing.T) {
	s, err := Parse([]byte("identities:\n  - name: a\n    certificates: [a]\n"), "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Resolve(nil, ""); !errors.Is(err, ErrUnknown) {
		t.Errorf("a client without identity: %v, want %v", err, ErrUnknown)
	}
}

// Every bad file is refused with an error naming the field.
func TestParseErrors(t *testing.T) {
	for name, tc := range map[string]struct{ src, want string }{
		"empty":         {"", "the file is empty"},
		"nothing":       {"identities: []\n", "identities: none, and no default entry"},
		"unknown field": {"identities:\n  - name: a\n    certificates: [a]\n    max_lease: 3\n", "max_lease"},
		"no name":       {"identities:\n  - certificates: [a]\n", "identities[0].name: required"},
		"twice":         {"identities:\n  - name: a\n    certificates: [a]\n  - name: a\n    certificates: [b]\n", `identities[1].name: "a" appears twice`},
		"no proof":      {"identities:\n  - name: a\n", "identities[0]: names no certificates"},
		"negative":      {"identities:\n  - name: a\n    certificates: [a]\n    max_queued: -1\n", "identities[0].max_queued: -1 must not be negative"},
		"plain token":   {"identities:\n  - name: a\n    tokens: [hunter2]\n", `identities[0].tokens[0]: must be "sha256:"`},
		"short digest":  {"identities:\n  - name: a\n    tokens: [\"sha256:abcd\"]\n", `identities[0].tokens[0]: "abcd" is not 64 hex digits`},
		"shared cert":   {"identities:\n  - name: a\n    certificates: [x]\n  - name: b\n    certificates: [x]\n", `identities[1].certificates[0]: "x" is also a's`},
		"shared token":  {"identities:\n  - name: a\n    tokens: [\"" + sum("t") + "\"]\n  - name: b\n    tokens: [\"" + sum("t") + "\"]\n", "identities[1].tokens[0]: the same token as a's"},
		"missing file":  {"identities:\n  - name: a\n    token_files: [nope.token]\n", "identities[0].token_files[0]: open"},
		"default proof": {"default:\n  certificates: [x]\n", "default: takes no certificates"},
		"empty class":   {"default:\n  classes: [\"\"]\n", "default.classes[0]: empty"},
		"type":          {"default:\n  max_leases: many\n", "cannot unmarshal"},
		"two documents": {"default: {}\n---\ndefault: {}\n", "more than one YAML document"},
		"named default": {"identities:\n  - name: default\n    certificates: [a]\n", `identities[0].name: "default" is the default entry's name`},
	} {
		_, err := Parse([]byte(tc.src), t.TempDir())
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", name, err, tc.want)
		}
	}
}

// Any input is either refused with an error or compiles into a set that
// resolves without panicking.
func FuzzParse(f *testing.F) {
	f.Add([]byte(strings.Replace(sample, "TOKSUM", sum("x"), 1)))
	f.Add([]byte("default:\n  classes: [batch]\n  max_leases: 1\n"))
	f.Add([]byte("identities:\n  - name: a\n    certificates: [a]\n    max_lease: 3\n"))
	f.Add([]byte("identities: [{name: a, tokens: [\"sha256:00\"]}]"))
	f.Add([]byte("{"))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := Parse(b, t.TempDir())
		if err != nil {
			if err.Error() == "" {
				t.Fatal("an empty error")
			}
			return
		}
		if len(s.All()) == 0 {
			t.Fatal("a set without identities compiled")
		}
		for _, id := range s.All() {
			if id.Name == "" || id.MaxLeases < 0 || id.MaxQueued < 0 || id.MaxSessions < 0 {
				t.Fatalf("compiled a bad identity: %+v", id)
			}
		}
		_, _ = s.Resolve(&x509.Certificate{Subject: pkix.Name{CommonName: "a"}}, "")
		_, _ = s.Resolve(nil, "x")
	})
}

// The set names the token files it read (to watch them) and its digest
// changes when a token file alone changes, not when nothing does.
func TestTokenFilesAndDigest(t *testing.T) {
	dir := t.TempDir()
	tokPath := filepath.Join(dir, "job.token")
	write := func(path, s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(tokPath, "file-token\n")
	path := filepath.Join(dir, "ids.yaml")
	write(path, "identities:\n  - name: job\n    token_files: [job.token]\n")
	load := func() *Set {
		t.Helper()
		s, err := Load(path)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	first := load()
	if got := first.TokenFiles(); len(got) != 1 || got[0] != tokPath {
		t.Errorf("TokenFiles() = %q, want [%q]", got, tokPath)
	}
	if again := load(); again.Digest() != first.Digest() {
		t.Error("the digest changed though nothing did")
	}
	write(tokPath, "file-token\n\n") // the same token
	if again := load(); again.Digest() != first.Digest() {
		t.Error("the digest changed though the token did not")
	}
	write(tokPath, "rotated-token\n")
	if rotated := load(); rotated.Digest() == first.Digest() {
		t.Error("the digest is the same after the token file's token changed")
	}
	write(path, "identities:\n  - name: job\n    token_files: [job.token]\n    max_leases: 1\n")
	write(tokPath, "file-token\n")
	if changed := load(); changed.Digest() == first.Digest() {
		t.Error("the digest is the same after the identities file changed")
	}
	inline, err := Parse([]byte("identities:\n  - name: gw\n    certificates: [gw]\n"), "")
	if err != nil {
		t.Fatal(err)
	}
	if got := inline.TokenFiles(); len(got) != 0 {
		t.Errorf("TokenFiles() of a set without token_files = %q, want none", got)
	}
}
