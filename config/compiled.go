package config

import (
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/llmesh/llmesh/internal/tlsfiles"
)

// Config is the compiled, validated, immutable runtime form of a Mesh:
// references are resolved to pointers, durations parsed, defaults applied.
// Share it freely between goroutines; never modify it. A new config is a
// new *Config (see Watcher).
type Config struct {
	// Source is the defaulted source form this was compiled from (for admin
	// display and for building the Envoy filter config). Do not modify.
	Source *Mesh
	// Listeners in file order.
	Listeners []*Listener
	// Pools in file order.
	Pools []*Pool
	// Classes in file order.
	Classes []*Class
	// DefaultClass is never nil.
	DefaultClass *Class
	// Classification is the compiled classification table.
	Classification Classification
	// Relocation rules.
	Relocation Relocation
	// Telemetry settings.
	Telemetry Telemetry
	// SchedulerService is nil when hosts schedule in-process.
	SchedulerService *SchedulerService
	// Experiments in file order.
	Experiments []*Experiment
	// AdminAddress is empty when no admin listener is configured.
	AdminAddress string

	pools       map[string]*Pool
	classes     map[string]*Class
	experiments map[string]*Experiment
	listeners   map[string]*Listener
}

// Pool returns the pool called name, or nil.
func (c *Config) Pool(name string) *Pool { return c.pools[name] }

// Class returns the class called name, or nil.
func (c *Config) Class(name string) *Class { return c.classes[name] }

// ClassOrDefault returns the class called name, or the default class when
// there is none by that name (unknown or spoofed class claims).
func (c *Config) ClassOrDefault(name string) *Class {
	if cl := c.classes[name]; cl != nil {
		return cl
	}
	return c.DefaultClass
}

// Experiment returns the experiment called name, or nil.
func (c *Config) Experiment(name string) *Experiment { return c.experiments[name] }

// Listener returns the listener called name, or nil.
func (c *Config) Listener(name string) *Listener { return c.listeners[name] }

// Listener is a compiled listener.
type Listener struct {
	Name    string
	Address string
	// Host and Port split from Address.
	Host   string
	Port   int
	Routes []*Route
	// Limits are the client limits of the embedded gateway
	// (ListenerSpec.Limits): 0 keeps the gateway's default, a negative
	// value turns the limit off.
	Limits ListenerLimits
	// DataPlane is DataPlaneGolang or DataPlaneExtProc
	// (ListenerSpec.DataPlane); ExtProc is set with DataPlaneExtProc only.
	DataPlane string
	ExtProc   *ExtProc
}

// The data planes llmesh control can put on a listener
// (ListenerSpec.DataPlane).
const (
	DataPlaneGolang  = "golang"
	DataPlaneExtProc = "ext_proc"
)

// knownDataPlanes are the values of ListenerSpec.DataPlane.
var knownDataPlanes = []string{DataPlaneGolang, DataPlaneExtProc}

// DefaultExtProcMessageTimeout is ExtProcSpec.MessageTimeout when omitted
// and no class may queue longer.
const DefaultExtProcMessageTimeout = 30 * time.Second

// maxExtProcMessageTimeout is the largest message_timeout Envoy accepts.
const maxExtProcMessageTimeout = time.Hour

// ExtProc is ExtProcSpec compiled.
type ExtProc struct {
	// Address is host:port, split into Host and Port.
	Address          string
	Host             string
	Port             int
	FailureModeAllow bool
	MessageTimeout   time.Duration
	// TLS is nil for plaintext.
	TLS *ExtProcTLSSpec
}

// ListenerLimits is ListenerLimitsSpec compiled.
type ListenerLimits struct {
	BodyTimeout, WriteTimeout, IdleTimeout time.Duration
	BodyBudgetBytes                        int64
	MaxConnsPerClient, MaxStreamsPerConn   int
}

// RouteMatch is what a route matches a request on, with the one rule both
// hosts route by: the path starts with PathPrefix, every header in Headers
// has exactly its value, and a route to a gRPC pool takes gRPC requests
// only, a route to any other pool the rest (unless AnyProtocol).
type RouteMatch struct {
	// PathPrefix "" matches every path.
	PathPrefix string
	// Headers are exact matches; nil matches all.
	Headers map[string]string
	// GRPC is true for a route to a gRPC pool.
	GRPC bool
	// AnyProtocol makes the route take gRPC and other requests alike.
	AnyProtocol bool
}

// Matches reports whether a request with this path, headers and protocol
// takes the route.
func (m *RouteMatch) Matches(path string, header func(name string) string, grpc bool) bool {
	if !m.AnyProtocol && m.GRPC != grpc {
		return false
	}
	if len(path) < len(m.PathPrefix) || path[:len(m.PathPrefix)] != m.PathPrefix {
		return false
	}
	return headersMatch(m.Headers, header)
}

// Route is a compiled route.
type Route struct {
	// Name is unique within the listener; ID is "<listener>/<route>",
	// unique in the mesh.
	Name string
	ID   string
	// PathPrefix always starts with "/".
	PathPrefix string
	// Headers are exact matches, names lower-cased.
	Headers map[string]string
	Pool    *Pool
	// Class is nil when the route does not fix the class.
	Class *Class
	// Experiment is nil when the route's traffic is not split.
	Experiment *Experiment
	// Generation is the route's generation paths (RouteSpec.Generation);
	// nil: the hosts' defaults.
	Generation []string
}

// Match is what r matches requests on.
func (r *Route) Match() RouteMatch {
	return RouteMatch{PathPrefix: r.PathPrefix, Headers: r.Headers, GRPC: r.Pool != nil && r.Pool.Protocol == ProtocolGRPC}
}

func headersMatch(want map[string]string, header func(string) string) bool {
	for k, v := range want {
		if header == nil || header(k) != v {
			return false
		}
	}
	return true
}

// Protocol is a pool's wire protocol.
type Protocol string

// Endpoint is one upstream address.
type Endpoint struct {
	Host string
	Port int
	// MaxInflight is the endpoint's own limit; 0 means the pool's share.
	MaxInflight int
	// MetricsURL is the endpoint's own /metrics (metrics_url or the pool's
	// url_template); empty means none.
	MetricsURL string
}

// Pool is a compiled pool.
type Pool struct {
	Name           string
	Protocol       Protocol
	Endpoints      []Endpoint
	ConnectTimeout time.Duration
	// MaxInflight > 0; MaxInflightTokens 0 means unbounded.
	MaxInflight       int
	MaxInflightTokens int
	// Metrics is nil when capacity is not learned from the engine.
	Metrics *MetricsSource
	// Scheduler is the pool's own scheduler config (experiment arms carry
	// their merged configs).
	Scheduler SchedulerConfig
	// Experiment is the experiment on this pool, or nil.
	Experiment *Experiment
	// EnginePriority is enginePriorityStrip or enginePriorityClass: what
	// hosts write into the engine priority of a request whose source is
	// not trusted for priority (PoolSpec.EnginePriority).
	EnginePriority string
	// AffinityHeader is the lower-cased request header whose value is the
	// scheduler's affinity key; empty means none.
	AffinityHeader string
	// PrefixWeight > 0 turns on prefix routing with that weight, each
	// endpoint remembering PrefixCapacityBlocks blocks
	// (PoolSpec.PrefixRouting); 0 means off.
	PrefixWeight         float64
	PrefixCapacityBlocks int
	// PrefixKVEvents, when set, makes the prefix index precise, fed by
	// the engines' KV-cache events (PrefixRoutingSpec.KVEvents).
	PrefixKVEvents *KVEventSource
	// Resume is one of KnownResume: what a host does with a stream of the
	// pool preempted after it sent bytes (PoolPreemptionSpec.Resume).
	Resume string
	// Ejection tunes outcome-based ejection (PoolSpec.Ejection); zero
	// fields mean the scheduler's defaults.
	Ejection Ejection
	// AcceptUpstreamPick: a pick made upstream of the host names the
	// request's endpoint (PoolSpec.AcceptUpstreamPick).
	AcceptUpstreamPick bool
}

// Ejection is a compiled EjectionSpec.
type Ejection struct {
	Failures  int
	Base, Max time.Duration
}

// KVEventSource is where a pool's engines publish KV-cache events.
type KVEventSource struct {
	Topic string
	// Publishers maps an endpoint's Address() to its tcp://HOST:PORT.
	Publishers map[string]string
}

// ClassEnginePriority reports whether requests to p carry their class's
// priority to the engine (engine_priority: class).
func (p *Pool) ClassEnginePriority() bool {
	return p != nil && p.EnginePriority == enginePriorityClass
}

// MetricsSource is an engine /metrics scrape.
type MetricsSource struct {
	URL        string
	Interval   time.Duration
	StaleAfter time.Duration
}

// SchedulerConfig is a compiled scheduler configuration.
type SchedulerConfig struct {
	// Policy is one of knownPolicies.
	Policy      string
	BatchWindow time.Duration
	// Aging 0 disables aging.
	Aging time.Duration
	// MaxPrefillTokens and ReserveUrgent are the scheduler's PoolConfig
	// fields of the same names; 0 turns each off.
	MaxPrefillTokens int
	ReserveUrgent    int
	// StaticBounds is the scheduler's PoolConfig.StaticBounds.
	StaticBounds bool
	// OverloadRelease is the scheduler's PoolConfig.OverloadRelease (0:
	// the default factor, negative: never).
	OverloadRelease float64
	Preemption      PreemptionConfig
}

// PreemptionConfig holds the preemption guard rails.
type PreemptionConfig struct {
	MinLowerInflight int
	MinRunTime       time.Duration
	MaxPerRequest    int
	// Target is in (0, 1]; the scheduler's PreemptionConfig.Target.
	Target float64
	// AbortProbe is the scheduler's PreemptionConfig.AbortProbe; 0 never
	// probes.
	AbortProbe time.Duration
}

// Class is a compiled class.
type Class struct {
	Name string
	// Priority: lower is served first (vLLM semantics).
	Priority int
	// TTFT and TPOT are the SLOs; 0 means no objective.
	TTFT        time.Duration
	TPOT        time.Duration
	Preemptible bool
	MaxQueue    int
	// MaxWait 0 means no limit.
	MaxWait          time.Duration
	AttainmentTarget float64
}

// Classification is the compiled classification table.
type Classification struct {
	Rules        []ClassRule
	TenantHeader string
	Tenants      map[string]*Class
	APIKeyHeader string
	APIKeys      map[string]*Class
	// PriorityHeader is "" when clients may not pick their class.
	PriorityHeader string
	TrustedSources []netip.Prefix
	// TrustedMarkerHeader (lower-cased) is "" when no marker is configured;
	// TrustedMarkerValue is then "" too, and never "" otherwise.
	TrustedMarkerHeader string
	TrustedMarkerValue  string
	// trustedMarkerHash is set when TrustedMarkerValue was given as
	// "sha256:<hex>" (as llmesh control pushes it): the request's marker
	// is hashed and compared with it.
	trustedMarkerHash *[sha256.Size]byte
}

// Marked reports whether value, the request's TrustedMarkerHeader value,
// is the configured marker; the priority header is then honoured whatever
// the peer. The comparison takes the same time wherever the values differ,
// so the marker cannot be guessed byte by byte.
func (c *Classification) Marked(value string) bool {
	if c.TrustedMarkerHeader == "" || value == "" {
		return false
	}
	if h := c.trustedMarkerHash; h != nil {
		got := sha256.Sum256([]byte(value))
		return subtle.ConstantTimeCompare(got[:], h[:]) == 1
	}
	return subtle.ConstantTimeCompare([]byte(value), []byte(c.TrustedMarkerValue)) == 1
}

// HashedSecret is secret as "sha256:<64 hex digits>", the form in which
// classification.api_keys and trusted_marker.value may be written, so that
// a config can carry them without the secrets themselves (llmesh control
// pushes them so). A value already in that form is returned as it is.
func HashedSecret(secret string) string {
	if _, ok := parseSecretHash(secret); ok {
		return secret
	}
	h := sha256.Sum256([]byte(secret))
	return "sha256:" + hex.EncodeToString(h[:])
}

// parseSecretHash decodes "sha256:<64 hex digits>".
func parseSecretHash(s string) (*[sha256.Size]byte, bool) {
	hexs, ok := strings.CutPrefix(s, "sha256:")
	if !ok {
		return nil, false
	}
	b, err := hex.DecodeString(hexs)
	if err != nil || len(b) != sha256.Size {
		return nil, false
	}
	var h [sha256.Size]byte
	copy(h[:], b)
	return &h, true
}

// Trusted reports whether the priority header from peer addr is honoured.
func (c *Classification) Trusted(addr netip.Addr) bool {
	addr = addr.Unmap()
	for _, p := range c.TrustedSources {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// ClassRule is a compiled classification rule.
type ClassRule struct {
	PathPrefix string
	Model      string
	Class      *Class
}

// Relocation is the compiled relocation rule set.
type Relocation struct {
	GRPC []GRPCRelocation
	HTTP []HTTPRelocation
	// MaxMessage bounds the first gRPC message after relocation; it is at
	// least every GRPC rule's Max.
	MaxMessage int
	// MaxBody bounds a JSON body after relocation; it is at least every
	// HTTP rule's Max.
	MaxBody int
}

// Enabled reports whether any relocation rule exists.
func (r *Relocation) Enabled() bool { return len(r.GRPC)+len(r.HTTP) > 0 }

// MaxValue is the largest Max over all rules (hosts size header limits
// from it); 0 without rules.
func (r *Relocation) MaxValue() int {
	m := 0
	for _, g := range r.GRPC {
		m = max(m, g.Max)
	}
	for _, h := range r.HTTP {
		m = max(m, h.Max)
	}
	return m
}

// Telemetry is the compiled telemetry config.
type Telemetry struct {
	ServiceName string
	// PrometheusPath is "" when the Prometheus endpoint is disabled.
	PrometheusPath string
	// OTLPEndpoint is "" when OTLP export is disabled.
	OTLPEndpoint string
	OTLPInsecure bool
	OTLPInterval time.Duration
	ServerTiming bool
}

// SchedulerService is the compiled shared-scheduler setting.
type SchedulerService struct {
	Address  string
	FailOpen bool
	Timeout  time.Duration
	// Transport is serviceTransportAuto, serviceTransportGRPC or
	// serviceTransportFramed.
	Transport string
	// ReportDelay is how long progress and release reports may wait for
	// the proxy's next message; 0 sends each at once.
	ReportDelay time.Duration
	// TLS is nil for plaintext; its files are read when a host connects
	// (ServiceTLS).
	TLS *ServiceTLSSpec
	// TokenFile is the bearer token's file ("" for none); read when a host
	// connects (ServiceToken).
	TokenFile string
}

// ServiceToken is the bearer token a host sends the service, or "" for
// none; an error names the field.
func (s *SchedulerService) ServiceToken() (string, error) {
	if s.TokenFile == "" {
		return "", nil
	}
	b, err := os.ReadFile(s.TokenFile)
	if err != nil {
		return "", fmt.Errorf("scheduler_service.token_file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" || strings.ContainsAny(tok, " \t\r\n") {
		return "", fmt.Errorf("scheduler_service.token_file: %s must hold one token, without whitespace", s.TokenFile)
	}
	return tok, nil
}

// ServiceTLS is the TLS config a host reaches the service with, or nil
// for plaintext; an error names the field whose file is bad.
func (s *SchedulerService) ServiceTLS() (*tls.Config, error) {
	if s.TLS == nil {
		return nil, nil
	}
	c, err := tlsfiles.Client(s.TLS.CAFile, s.TLS.CertFile, s.TLS.KeyFile, s.TLS.ServerName)
	if err != nil {
		return nil, fmt.Errorf("scheduler_service.tls: %w", err)
	}
	return c, nil
}

// Experiment is a compiled experiment.
type Experiment struct {
	Name string
	Pool *Pool
	Arms []*Arm
	// Active is nil unless one arm takes all traffic.
	Active *Arm
	// totalWeight is the sum of arm weights.
	totalWeight int
}

// Arm returns the arm called name, or nil.
func (e *Experiment) Arm(name string) *Arm {
	for _, a := range e.Arms {
		if a.Name == name {
			return a
		}
	}
	return nil
}

// Pick chooses the arm for one request: the active arm if set, else the
// first arm whose headers all match, else a weighted choice by u, a
// uniform number in [0, 1) supplied by the caller (so tests and hosts
// control randomness), else the first arm.
func (e *Experiment) Pick(header func(name string) string, u float64) *Arm {
	if e.Active != nil {
		return e.Active
	}
	for _, a := range e.Arms {
		if len(a.Headers) > 0 && headersMatch(a.Headers, header) {
			return a
		}
	}
	if e.totalWeight > 0 {
		if !(u > 0) { // negative or NaN
			u = 0
		}
		x := int(min(u, 1) * float64(e.totalWeight))
		for _, a := range e.Arms {
			if a.Weight > 0 && x < a.Weight {
				return a
			}
			x -= a.Weight
		}
		for i := len(e.Arms) - 1; i >= 0; i-- {
			if e.Arms[i].Weight > 0 {
				return e.Arms[i]
			}
		}
	}
	return e.Arms[0]
}

// TotalWeight is the sum of the arms' weights.
func (e *Experiment) TotalWeight() int { return e.totalWeight }

// ArmPoolName is the name of the pool that carries one experiment arm's
// traffic with the arm's scheduler config where a data plane gives each arm
// a pool of its own: control names the Envoy cluster and filter pool so,
// and the shared scheduler service serves a pool by that name.
func ArmPoolName(pool, arm string) string { return pool + ".arm-" + arm }

// ArmPool is one experiment arm's pool where a data plane gives each arm
// a pool of its own.
type ArmPool struct {
	// Pool is a copy of the experiment's pool named ArmPoolName(pool, arm),
	// with the arm's scheduler config; its Experiment is nil.
	Pool       *Pool
	Experiment *Experiment
	Arm        *Arm
}

// ArmPools expands every experiment arm into its pool, in experiment and
// arm order: the one expansion the scheduler config, the gateway's pools
// and control's Envoy pools are built from. A name that is already a pool
// of c (a mesh that spells its arm pools out, as the filter's does) is
// still listed; callers decide whether that is a clash.
func (c *Config) ArmPools() []ArmPool {
	var out []ArmPool
	for _, e := range c.Experiments {
		for _, a := range e.Arms {
			p := *e.Pool
			p.Name = ArmPoolName(e.Pool.Name, a.Name)
			p.Scheduler = a.Scheduler
			p.Experiment = nil
			out = append(out, ArmPool{Pool: &p, Experiment: e, Arm: a})
		}
	}
	return out
}

// Arm is a compiled experiment arm.
type Arm struct {
	Name   string
	Weight int
	// Headers are exact matches, names lower-cased.
	Headers map[string]string
	// Scheduler is the pool's scheduler config with the arm's overrides.
	Scheduler SchedulerConfig
}

// GRPCRelocation is a compiled gRPC relocation rule.
type GRPCRelocation struct {
	// Method "" applies to every method.
	Method   string
	Metadata string
	Field    int
	// Bytes is true for a bytes field, false for string.
	Bytes     bool
	Threshold int
	Max       int
	// Refuse is true when compressed messages are refused instead of
	// recompressed.
	Refuse bool
}

// HTTPRelocation is a compiled HTTP relocation rule.
type HTTPRelocation struct {
	// PathPrefix "" applies to every path.
	PathPrefix string
	// Header is lower-cased.
	Header    string
	Field     string
	Threshold int
	Max       int
}
