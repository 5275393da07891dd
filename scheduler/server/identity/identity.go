// Package identity reads the scheduler service's identities file: who a
// client is (its mTLS certificate's subject CN or URI SAN, or a bearer
// token) and what it may use (classes, pools) and hold (leases, queued
// requests, sessions).
//
// The file (YAML, decoded strictly: an unknown field is an error):
//
//	identities:
//	  - name: gateway-a                       # the name in logs and metrics
//	    certificates: [gateway-a.mesh.internal, "spiffe://mesh/gateway-a"]
//	    tokens: ["sha256:<64 hex digits>"]    # digests of bearer tokens
//	    token_files: [gateway-a.token]        # or files holding a token
//	    classes: [interactive, batch]         # empty: every class
//	    pools: [chat]                         # empty: every pool
//	    max_leases: 512                       # 0: no limit of its own
//	    max_queued: 128
//	    max_sessions: 4
//	    max_bytes: 1048576                    # of the Starts its leases hold
//	default:                                  # every client that matches no identity
//	  classes: [batch]
//	  max_leases: 16
//
// A client that presents a token must present one of an identity's
// (an unknown token is refused, never taken for the default); otherwise
// its certificate's names pick the identity, and a client that matches
// none gets the default entry, or is refused when there is none.
package identity

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"gopkg.in/yaml.v3"
)

// File is the identities file as written.
type File struct {
	Identities []Spec `yaml:"identities"`
	Default    *Spec  `yaml:"default"`
}

// Spec is one identity as written (the default entry has no name,
// certificates or tokens).
type Spec struct {
	Name         string   `yaml:"name"`
	Certificates []string `yaml:"certificates"`
	Tokens       []string `yaml:"tokens"`
	TokenFiles   []string `yaml:"token_files"`
	Classes      []string `yaml:"classes"`
	Pools        []string `yaml:"pools"`
	MaxLeases    int      `yaml:"max_leases"`
	MaxQueued    int      `yaml:"max_queued"`
	MaxSessions  int      `yaml:"max_sessions"`
	MaxBytes     int64    `yaml:"max_bytes"`
}

// Identity is one compiled identity: what a client that proves it may use
// and hold. Zero limits mean none of its own (the service's still apply).
type Identity struct {
	Name        string
	classes     map[string]bool // nil: every class
	pools       map[string]bool // nil: every pool
	MaxLeases   int
	MaxQueued   int
	MaxSessions int
	// MaxBytes bounds the bytes of the Starts its leases hold at once
	// (request ids, affinity keys, block hashes: what the service keeps
	// while they wait or run), all its sessions together.
	MaxBytes int64
}

// AllowsClass says whether the identity may send requests of class.
func (id *Identity) AllowsClass(class string) bool { return id.classes == nil || id.classes[class] }

// AllowsPool says whether the identity may send requests to pool.
func (id *Identity) AllowsPool(pool string) bool { return id.pools == nil || id.pools[pool] }

// Set is a compiled identities file.
type Set struct {
	byName  map[string]*Identity
	byCert  map[string]*Identity
	byToken map[[sha256.Size]byte]*Identity
	def     *Identity // nil: clients that match no identity are refused
	all     []*Identity
	// files are the token files it read, as opened; digest covers the
	// file's bytes and, in order, the digests of the tokens they held.
	files  []string
	sums   [][sha256.Size]byte
	digest [sha256.Size]byte
}

// Errors of Resolve; the service refuses the session with them.
var (
	ErrUnknownToken = errors.New("the bearer token belongs to no identity")
	ErrUnknown      = errors.New("the client matches no identity and the identities file has no default")
)

// Load reads and compiles the identities file at path; token_files are
// read relative to its directory.
func Load(path string) (*Set, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("identities: %w", err)
	}
	s, err := Parse(b, filepath.Dir(path))
	if err != nil {
		return nil, fmt.Errorf("identities: %s: %w", path, err)
	}
	return s, nil
}

// Parse compiles an identities file's bytes; dir is where relative
// token_files are (empty: the working directory). Every problem is
// reported at once, each naming its field.
func Parse(b []byte, dir string) (*Set, error) {
	var f File
	d := yaml.NewDecoder(bytes.NewReader(b))
	d.KnownFields(true)
	if err := d.Decode(&f); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("the file is empty: it needs identities or a default entry")
		}
		return nil, err
	}
	var extra any
	if err := d.Decode(&extra); err == nil {
		return nil, errors.New("more than one YAML document")
	}
	s, err := compile(&f, dir)
	if err != nil {
		return nil, err
	}
	h := sha256.New()
	h.Write(b)
	for _, sum := range s.sums {
		h.Write(sum[:])
	}
	h.Sum(s.digest[:0])
	s.sums = nil
	return s, nil
}

// TokenFiles are the token files the set was compiled with, as read
// (relative to the identities file's directory when they were named
// relative): the files to watch besides the identities file itself.
func (s *Set) TokenFiles() []string { return s.files }

// Digest covers everything the set was compiled from: the file's bytes
// and the tokens its token_files held. Two sets with the same digest are
// the same set; a rotated token file alone changes it.
func (s *Set) Digest() [sha256.Size]byte { return s.digest }

func compile(f *File, dir string) (*Set, error) {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
	}
	s := &Set{byName: map[string]*Identity{}, byCert: map[string]*Identity{}, byToken: map[[sha256.Size]byte]*Identity{}}
	if len(f.Identities) == 0 && f.Default == nil {
		bad("identities", "none, and no default entry: every client would be refused")
	}
	for i := range f.Identities {
		s.all = append(s.all, s.add(&f.Identities[i], fmt.Sprintf("identities[%d]", i), dir, bad))
	}
	if d := f.Default; d != nil {
		if d.Name != "" && d.Name != "default" {
			bad("default.name", "%q: the default entry is named default", d.Name)
		}
		if len(d.Certificates)+len(d.Tokens)+len(d.TokenFiles) > 0 {
			bad("default", "takes no certificates, tokens or token_files: it is for clients that match none")
		}
		d.Name = "default"
		s.def = limits(d, "default", bad)
		s.all = append(s.all, s.def)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return s, nil
}

// add compiles the identity sp (at path in the file) into s.
func (s *Set) add(sp *Spec, path, dir string, bad func(field, format string, args ...any)) *Identity {
	id := limits(sp, path, bad)
	switch {
	case sp.Name == "":
		bad(path+".name", "required")
	case sp.Name == "default":
		bad(path+".name", `"default" is the default entry's name; use the default key`)
	case s.byName[sp.Name] != nil:
		bad(path+".name", "%q appears twice", sp.Name)
	default:
		s.byName[sp.Name] = id
	}
	if len(sp.Certificates)+len(sp.Tokens)+len(sp.TokenFiles) == 0 {
		bad(path, "names no certificates, tokens or token_files: no client could prove it")
	}
	for j, c := range sp.Certificates {
		field := fmt.Sprintf("%s.certificates[%d]", path, j)
		switch {
		case strings.TrimSpace(c) == "":
			bad(field, "empty")
		case s.byCert[c] != nil:
			bad(field, "%q is also %s's", c, s.byCert[c].Name)
		default:
			s.byCert[c] = id
		}
	}
	addToken := func(field string, sum [sha256.Size]byte) {
		if o := s.byToken[sum]; o != nil {
			bad(field, "the same token as %s's", o.Name)
			return
		}
		s.byToken[sum] = id
	}
	for j, t := range sp.Tokens {
		field := fmt.Sprintf("%s.tokens[%d]", path, j)
		sum, err := digest(t)
		if err != nil {
			bad(field, "%v", err)
			continue
		}
		addToken(field, sum)
	}
	for j, name := range sp.TokenFiles {
		field := fmt.Sprintf("%s.token_files[%d]", path, j)
		file := join(dir, name)
		tok, err := ReadToken(file)
		if err != nil {
			bad(field, "%v", err)
			continue
		}
		sum := sha256.Sum256([]byte(tok))
		s.files, s.sums = append(s.files, file), append(s.sums, sum)
		addToken(field, sum)
	}
	return id
}

// limits compiles sp's classes, pools and limits.
func limits(sp *Spec, path string, bad func(field, format string, args ...any)) *Identity {
	id := &Identity{Name: sp.Name, MaxLeases: sp.MaxLeases, MaxQueued: sp.MaxQueued, MaxSessions: sp.MaxSessions, MaxBytes: sp.MaxBytes}
	for field, v := range map[string]int64{"max_leases": int64(sp.MaxLeases), "max_queued": int64(sp.MaxQueued), "max_sessions": int64(sp.MaxSessions),
		"max_bytes": sp.MaxBytes} {
		if v < 0 {
			bad(path+"."+field, "%d must not be negative (0: no limit of its own)", v)
		}
	}
	id.classes = set(sp.Classes, path+".classes", bad)
	id.pools = set(sp.Pools, path+".pools", bad)
	return id
}

func set(names []string, field string, bad func(field, format string, args ...any)) map[string]bool {
	if len(names) == 0 {
		return nil
	}
	m := make(map[string]bool, len(names))
	for i, n := range names {
		if strings.TrimSpace(n) == "" {
			bad(fmt.Sprintf("%s[%d]", field, i), "empty")
		}
		m[n] = true
	}
	return m
}

func join(dir, name string) string {
	if filepath.IsAbs(name) || dir == "" {
		return name
	}
	return filepath.Join(dir, name)
}

// digest parses a token's "sha256:<hex>" form.
func digest(t string) ([sha256.Size]byte, error) {
	var sum [sha256.Size]byte
	h, ok := strings.CutPrefix(t, "sha256:")
	if !ok {
		return sum, errors.New(`must be "sha256:" and the token's SHA-256 in hex (printf %s "$TOKEN" | sha256sum), never the token itself; or use token_files`)
	}
	b, err := hex.DecodeString(h)
	if err != nil || len(b) != sha256.Size {
		return sum, fmt.Errorf("%q is not 64 hex digits", h)
	}
	copy(sum[:], b)
	return sum, nil
}

// maxToken bounds a token file's size.
const maxToken = 4096

// ReadToken reads a bearer token from a file: its content without
// surrounding whitespace, which must not be empty or hold whitespace or
// control characters (it travels in a header).
func ReadToken(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return "", fmt.Errorf("%s is not a regular file", path)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxToken+1))
	if err != nil {
		return "", err
	}
	if len(b) > maxToken {
		return "", fmt.Errorf("%s is over %d bytes: not a token", path, maxToken)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("%s holds no token", path)
	}
	if i := strings.IndexFunc(tok, func(r rune) bool { return r <= ' ' || r == 0x7f }); i >= 0 {
		return "", fmt.Errorf("%s: the token holds whitespace or a control character at byte %d", path, i)
	}
	return tok, nil
}

// Resolve is the identity of a client that presented token (empty: none)
// and, over mTLS, the verified certificate cert (nil: none). A token must
// be an identity's; otherwise the certificate's subject CN or one of its
// URI SANs names the identity; failing both, the default entry.
func (s *Set) Resolve(cert *x509.Certificate, token string) (*Identity, error) {
	if token != "" {
		// Looked up by digest: how long the lookup takes tells nothing
		// about the tokens the file holds.
		if id := s.byToken[sha256.Sum256([]byte(token))]; id != nil {
			return id, nil
		}
		return nil, ErrUnknownToken
	}
	if cert != nil {
		if id := s.byCert[cert.Subject.CommonName]; id != nil && cert.Subject.CommonName != "" {
			return id, nil
		}
		for _, u := range cert.URIs {
			if id := s.byCert[u.String()]; id != nil {
				return id, nil
			}
		}
	}
	if s.def == nil {
		return nil, ErrUnknown
	}
	return s.def, nil
}

// All is every identity of the set, the default entry last (when there is
// one).
func (s *Set) All() []*Identity { return s.all }
