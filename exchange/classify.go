package exchange

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/llmesh/llmesh/config"
)

// Class is a priority class as the data plane needs it.
type Class struct {
	Name string
	// Priority follows vLLM: a lower value is served first.
	Priority int
	// TTFT and TPOT are the class's SLOs; zero means no objective.
	TTFT        time.Duration
	TPOT        time.Duration
	Preemptible bool
}

// Rule classifies by path prefix and/or model; empty fields match anything.
type Rule struct {
	PathPrefix string
	Model      string
	Class      string
}

// ClassifierConfig is the classification table. NewClassifierFromConfig
// builds one from the mesh config; tests and other hosts can fill it in
// directly.
type ClassifierConfig struct {
	// Classes are the known classes; names must be unique and non-empty.
	Classes []Class
	// DefaultClass names the class of everything not classified otherwise;
	// empty means the first class.
	DefaultClass string
	// Rules are tried in order; the first match wins.
	Rules []Rule
	// TenantHeader names the header carrying the tenant ("" disables);
	// Tenants maps tenant → class name.
	TenantHeader string
	Tenants      map[string]string
	// APIKeyHeader names the header carrying the API key ("" means
	// "authorization" when APIKeys is set; a "Bearer " prefix is stripped).
	// APIKeys maps key → class name; a key may be given as
	// "sha256:<64 hex digits>" so that the plain key never sits in config.
	APIKeyHeader string
	APIKeys      map[string]string
	// PriorityHeader names a header whose value is a class name (or a
	// priority number: the most urgent class not more urgent than asked).
	// It is honoured only when the peer address is in TrustedSources or the
	// request carries TrustedMarkerHeader with TrustedMarkerValue (set by a
	// trusted upstream hop that strips it from clients). "" disables it.
	PriorityHeader      string
	TrustedSources      []netip.Prefix
	TrustedMarkerHeader string
	TrustedMarkerValue  string
}

// Source says which part of the configuration decided a class.
type Source uint8

const (
	SourceDefault Source = iota
	SourceRoute
	SourceAPIKey
	SourceTenant
	SourceHeader
	SourceRule
)

var sourceNames = [...]string{"default", "route", "api_key", "tenant", "priority_header", "rule"}

func (s Source) String() string {
	if int(s) < len(sourceNames) {
		return sourceNames[s]
	}
	return "unknown"
}

// RequestInfo is what classification looks at. The host fills it from the
// request; Model comes from the body when the host parsed it.
type RequestInfo struct {
	Path  string
	Model string
	// RouteClass is the class fixed by the matched route ("" when none).
	RouteClass string
	// Peer is the immediate peer's address (zero when unknown: untrusted).
	Peer    netip.Addr
	Headers Headers
}

// Classification is a request's class and why it got it.
type Classification struct {
	Class
	Source Source
	// Reason is a human-readable account for debugging; it never contains
	// API keys.
	Reason string
}

// Classifier maps requests to classes. It is immutable and safe for
// concurrent use.
type Classifier struct {
	classes        map[string]Class
	list           []Class // config order
	byPriority     []Class // ascending priority
	def            Class
	rules          []Rule
	tenantHeader   string
	tenants        map[string]string
	apiKeyHeader   string
	apiKeys        map[[sha256.Size]byte]string
	priorityHeader string
	trusted        []netip.Prefix
	markerHeader   string
	markerValue    string
}

// NewClassifier validates cfg and compiles it. Errors name the field and
// value (never an API key).
func NewClassifier(cfg ClassifierConfig) (*Classifier, error) {
	var errs []error
	c := &Classifier{classes: make(map[string]Class, len(cfg.Classes))}
	for i, cl := range cfg.Classes {
		switch {
		case cl.Name == "":
			errs = append(errs, fmt.Errorf("classes[%d].name: is required", i))
		case c.hasClass(cl.Name):
			errs = append(errs, fmt.Errorf("classes[%d].name: %q is defined twice", i, cl.Name))
		default:
			c.classes[cl.Name] = cl
			c.list = append(c.list, cl)
			c.byPriority = append(c.byPriority, cl)
		}
	}
	if len(cfg.Classes) == 0 {
		errs = append(errs, errors.New("classes: at least one class is required"))
	}
	sortByPriority(c.byPriority)
	ref := func(path, name string) {
		if !c.hasClass(name) {
			errs = append(errs, fmt.Errorf("%s: %q is not a defined class", path, name))
		}
	}
	switch {
	case cfg.DefaultClass != "":
		ref("default_class", cfg.DefaultClass)
		c.def = c.classes[cfg.DefaultClass]
	case len(cfg.Classes) > 0:
		c.def = cfg.Classes[0]
	}
	for i, r := range cfg.Rules {
		ref(fmt.Sprintf("rules[%d].class", i), r.Class)
	}
	c.rules = append([]Rule(nil), cfg.Rules...)
	c.tenantHeader = strings.ToLower(cfg.TenantHeader)
	c.tenants = make(map[string]string, len(cfg.Tenants))
	for t, name := range cfg.Tenants {
		ref(fmt.Sprintf("tenants[%q]", t), name)
		c.tenants[t] = name
	}
	if len(cfg.Tenants) > 0 && c.tenantHeader == "" {
		errs = append(errs, errors.New("tenant_header: is required when tenants are set"))
	}
	c.apiKeyHeader = strings.ToLower(cfg.APIKeyHeader)
	if c.apiKeyHeader == "" {
		c.apiKeyHeader = "authorization"
	}
	c.apiKeys = make(map[[sha256.Size]byte]string, len(cfg.APIKeys))
	for key, name := range cfg.APIKeys {
		if !c.hasClass(name) {
			errs = append(errs, fmt.Errorf("api_keys: an API key maps to %q, which is not a defined class", name))
		}
		h, err := keyHash(key)
		if err != nil {
			errs = append(errs, fmt.Errorf("api_keys: %w", err))
			continue
		}
		c.apiKeys[h] = name
	}
	c.priorityHeader = strings.ToLower(cfg.PriorityHeader)
	c.trusted = append([]netip.Prefix(nil), cfg.TrustedSources...)
	c.markerHeader = strings.ToLower(cfg.TrustedMarkerHeader)
	c.markerValue = cfg.TrustedMarkerValue
	if c.markerHeader != "" && c.markerValue == "" {
		errs = append(errs, errors.New("trusted_marker_value: is required with trusted_marker_header (an empty marker would trust everyone)"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return c, nil
}

// NewClassifierFromConfig builds a Classifier from the compiled mesh
// config (which has already validated it).
func NewClassifierFromConfig(cfg *config.Config) (*Classifier, error) {
	if cfg == nil {
		return nil, errors.New("filter: nil config")
	}
	cc := ClassifierConfig{
		TenantHeader:   cfg.Classification.TenantHeader,
		APIKeyHeader:   cfg.Classification.APIKeyHeader,
		PriorityHeader: cfg.Classification.PriorityHeader,
		TrustedSources: cfg.Classification.TrustedSources,
		Tenants:        map[string]string{},
		APIKeys:        map[string]string{},

		TrustedMarkerHeader: cfg.Classification.TrustedMarkerHeader,
		TrustedMarkerValue:  cfg.Classification.TrustedMarkerValue,
	}
	for _, cl := range cfg.Classes {
		cc.Classes = append(cc.Classes, classOf(cl))
	}
	if cfg.DefaultClass != nil {
		cc.DefaultClass = cfg.DefaultClass.Name
	}
	for _, r := range cfg.Classification.Rules {
		if r.Class != nil {
			cc.Rules = append(cc.Rules, Rule{PathPrefix: r.PathPrefix, Model: r.Model, Class: r.Class.Name})
		}
	}
	for t, cl := range cfg.Classification.Tenants {
		if cl != nil {
			cc.Tenants[t] = cl.Name
		}
	}
	for k, cl := range cfg.Classification.APIKeys {
		if cl != nil {
			cc.APIKeys[k] = cl.Name
		}
	}
	return NewClassifier(cc)
}

func classOf(c *config.Class) Class {
	return Class{Name: c.Name, Priority: c.Priority, TTFT: c.TTFT, TPOT: c.TPOT, Preemptible: c.Preemptible}
}

func keyHash(key string) ([sha256.Size]byte, error) {
	var h [sha256.Size]byte
	if hexs, ok := strings.CutPrefix(key, "sha256:"); ok {
		b, err := hex.DecodeString(hexs)
		if err != nil || len(b) != sha256.Size {
			return h, errors.New(`a "sha256:" key must be followed by 64 hex digits`)
		}
		copy(h[:], b)
		return h, nil
	}
	if key == "" {
		return h, errors.New("an API key is empty")
	}
	return sha256.Sum256([]byte(key)), nil
}

func (c *Classifier) hasClass(name string) bool {
	_, ok := c.classes[name]
	return ok
}

func sortByPriority(cs []Class) {
	for i := 1; i < len(cs); i++ {
		for j := i; j > 0 && cs[j].Priority < cs[j-1].Priority; j-- {
			cs[j], cs[j-1] = cs[j-1], cs[j]
		}
	}
}

// Default is the default class.
func (c *Classifier) Default() Class { return c.def }

// Classes returns the classes in configuration order (a copy), for
// example for telemetry.RecorderOptions.
func (c *Classifier) Classes() []Class { return append([]Class(nil), c.list...) }

// Class returns the class called name.
func (c *Classifier) Class(name string) (Class, bool) {
	cl, ok := c.classes[name]
	return cl, ok
}

// Classify decides r's class. Precedence, most trusted first: the route's
// class, API key, tenant, the priority header (only from a trusted source),
// rules in order, the default class. Unknown names fall through.
func (c *Classifier) Classify(r RequestInfo) Classification {
	h := r.Headers
	if h == nil {
		h = noHeaders
	}
	var notes string
	if r.RouteClass != "" {
		if cl, ok := c.classes[r.RouteClass]; ok {
			return Classification{Class: cl, Source: SourceRoute, Reason: "route class " + strconv.Quote(cl.Name)}
		}
		notes = "; route class " + strconv.Quote(r.RouteClass) + " unknown"
	}
	if len(c.apiKeys) > 0 {
		if key := apiKey(h.Get(c.apiKeyHeader)); key != "" {
			if name, ok := c.apiKeys[sha256.Sum256([]byte(key))]; ok {
				return Classification{Class: c.classes[name], Source: SourceAPIKey, Reason: "API key in " + c.apiKeyHeader + notes}
			}
			notes += "; API key not mapped"
		}
	}
	if c.tenantHeader != "" {
		if t := h.Get(c.tenantHeader); t != "" {
			if name, ok := c.tenants[t]; ok {
				return Classification{Class: c.classes[name], Source: SourceTenant, Reason: "tenant " + strconv.Quote(t) + notes}
			}
			notes += "; tenant " + strconv.Quote(truncString(t, 64)) + " not mapped"
		}
	}
	if c.priorityHeader != "" {
		if v := h.Get(c.priorityHeader); v != "" {
			switch {
			case !c.trustedPeer(r.Peer, h):
				notes += "; " + c.priorityHeader + " ignored from untrusted peer " + peerString(r.Peer)
			default:
				if cl, ok := c.claim(v); ok {
					return Classification{Class: cl, Source: SourceHeader,
						Reason: c.priorityHeader + " " + strconv.Quote(truncString(v, 64)) + " from trusted peer" + notes}
				}
				notes += "; " + c.priorityHeader + " " + strconv.Quote(truncString(v, 64)) + " names no class"
			}
		}
	}
	for i, rule := range c.rules {
		if rule.PathPrefix != "" && !strings.HasPrefix(r.Path, rule.PathPrefix) {
			continue
		}
		if rule.Model != "" && rule.Model != r.Model {
			continue
		}
		return Classification{Class: c.classes[rule.Class], Source: SourceRule, Reason: "rule " + strconv.Itoa(i) + notes}
	}
	return Classification{Class: c.def, Source: SourceDefault, Reason: "default class" + notes}
}

// trustedPeer reports whether the priority header may be believed.
func (c *Classifier) trustedPeer(peer netip.Addr, h Headers) bool {
	if c.markerHeader != "" {
		v := h.Get(c.markerHeader)
		if v != "" && subtle.ConstantTimeCompare([]byte(v), []byte(c.markerValue)) == 1 {
			return true
		}
	}
	if !peer.IsValid() {
		return false
	}
	peer = peer.Unmap()
	for _, p := range c.trusted {
		if p.Contains(peer) {
			return true
		}
	}
	return false
}

// claim resolves a priority header value: a class name, or a number picking
// the most urgent class whose priority is not below it (a client may ask
// for less urgency than any class offers, never for more).
func (c *Classifier) claim(v string) (Class, bool) {
	v = strings.TrimSpace(v)
	if cl, ok := c.classes[v]; ok {
		return cl, true
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return Class{}, false
	}
	for _, cl := range c.byPriority {
		if cl.Priority >= n {
			return cl, true
		}
	}
	return Class{}, false
}

func apiKey(v string) string {
	v = strings.TrimSpace(v)
	if len(v) > 7 && strings.EqualFold(v[:7], "bearer ") {
		v = strings.TrimSpace(v[7:])
	}
	return v
}

func peerString(a netip.Addr) string {
	if !a.IsValid() {
		return "(unknown)"
	}
	return a.String()
}

func truncString(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
