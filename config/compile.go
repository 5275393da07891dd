package config

import (
	"cmp"
	"fmt"
	"math"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/llmesh/llmesh/prefixindex"
)

// Limits on config values; values beyond them are field errors.
const (
	maxNameLen      = 63
	maxDuration     = 24 * time.Hour
	maxGRPCField    = 1<<29 - 1 // protobuf's largest field number
	maxRelocBytes   = 1 << 30
	maxQueueLength  = 1 << 24
	maxInflight     = 1 << 24
	maxArmWeight    = 1_000_000
	maxPreemptCount = 1000
)

var nameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9_.-]*[a-z0-9])?$`)

// headerRE is RFC 9110's token, the characters a header name may have.
var headerRE = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")

// Compile validates a defaulted Mesh and builds its runtime form. Every
// problem is reported, each with its field path, in one Errors value. m is
// not modified and is kept as the result's Source.
func Compile(m *Mesh) (*Config, error) {
	b := &builder{
		cfg: &Config{
			Source:      m,
			pools:       map[string]*Pool{},
			classes:     map[string]*Class{},
			experiments: map[string]*Experiment{},
			listeners:   map[string]*Listener{},
		},
	}
	b.classes(m)
	b.pools(m)
	b.experimentsOf(m)
	b.listenersOf(m)
	b.classification(m)
	b.relocation(m)
	b.telemetry(m)
	b.service(m)
	if m.Admin.Address != "" {
		b.hostPort("admin.address", m.Admin.Address, true)
		b.cfg.AdminAddress = m.Admin.Address
	}
	if err := b.c.err(); err != nil {
		return nil, err
	}
	return b.cfg, nil
}

// WithActiveArm returns a new config in which experiment exp sends all
// traffic to arm (arm "" clears the switch, restoring header/weight
// selection). c is not modified.
func (c *Config) WithActiveArm(exp, arm string) (*Config, error) {
	e := c.Experiment(exp)
	if e == nil {
		return nil, fmt.Errorf("config: no experiment %q", exp)
	}
	if arm != "" && e.Arm(arm) == nil {
		return nil, fmt.Errorf("config: experiment %q has no arm %q", exp, arm)
	}
	m := *c.Source
	m.Experiments = slices.Clone(c.Source.Experiments)
	for i := range m.Experiments {
		if m.Experiments[i].Name == exp {
			m.Experiments[i].Active = arm
		}
	}
	return Compile(&m)
}

// WithActiveArms applies active-arm switches (experiment → arm, as
// WithActiveArm) to c. A switch whose experiment or arm c does not have is
// skipped and returned in lapsed with the reason, so that a changed file
// does not fail on a switch made for the old one.
func (c *Config) WithActiveArms(switches map[string]string) (next *Config, lapsed map[string]error) {
	next = c
	for exp, arm := range switches {
		n, err := next.WithActiveArm(exp, arm)
		if err != nil {
			if lapsed == nil {
				lapsed = map[string]error{}
			}
			lapsed[exp] = err
			continue
		}
		next = n
	}
	return next, lapsed
}

type builder struct {
	c   collector
	cfg *Config
}

func (b *builder) name(path, v string) {
	switch {
	case v == "":
		b.c.add(path, 0, "is required")
	case len(v) > maxNameLen:
		b.c.add(path, 0, "%q is longer than %d characters", v, maxNameLen)
	case !nameRE.MatchString(v):
		b.c.add(path, 0, "%q must be lower-case letters, digits, '.', '_' or '-', starting and ending with a letter or digit", v)
	}
}

// duration parses a Go duration string; "" is 0. Negative values and values
// over maxDuration are errors; positive demands > 0.
func (b *builder) duration(path, v string, positive bool) time.Duration {
	if v == "" {
		if positive {
			b.c.add(path, 0, "is required")
		}
		return 0
	}
	d, err := time.ParseDuration(v)
	switch {
	case err != nil:
		b.c.add(path, 0, "%q is not a duration (use Go syntax such as \"250ms\" or \"1m30s\")", v)
	case d < 0 || (positive && d == 0):
		b.c.add(path, 0, "%q must be positive", v)
	case d > maxDuration:
		b.c.add(path, 0, "%q is over the limit of %s", v, maxDuration)
	}
	return d
}

// deref is *p, 0 for nil.
func deref(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}

func (b *builder) intRange(path string, v, lo, hi int) {
	if v < lo || v > hi {
		b.c.add(path, 0, "%d must be between %d and %d", v, lo, hi)
	}
}

func (b *builder) hostPort(path, v string, allowZeroPort bool) (string, int) {
	host, ps, err := net.SplitHostPort(v)
	if err != nil {
		b.c.add(path, 0, "%q must be host:port", v)
		return "", 0
	}
	port, err := strconv.Atoi(ps)
	lo := 1
	if allowZeroPort {
		lo = 0
	}
	if err != nil || port < lo || port > 65535 {
		b.c.add(path, 0, "%q has an invalid port", v)
		return "", 0
	}
	if host == "" && !allowZeroPort {
		b.c.add(path, 0, "%q needs a host", v)
	}
	return host, port
}

func (b *builder) header(path, v string) string {
	if !headerRE.MatchString(v) {
		b.c.add(path, 0, "%q is not a valid header name", v)
	}
	return strings.ToLower(v)
}

func (b *builder) headers(path string, in map[string]string) map[string]string {
	if len(in) == 0 {
		return nil
	}
	out := make(map[string]string, len(in))
	for _, k := range sortedKeys(in) {
		lk := b.header(key(path, k), k)
		if _, dup := out[lk]; dup {
			b.c.add(key(path, k), 0, "duplicate header (names are case-insensitive)")
		}
		out[lk] = in[k]
	}
	return out
}

func (b *builder) pathPrefix(path, v string) {
	if v != "" && !strings.HasPrefix(v, "/") {
		b.c.add(path, 0, "%q must start with \"/\"", v)
	}
}

func (b *builder) classRef(path, v string) *Class {
	if v == "" {
		b.c.add(path, 0, "is required")
		return nil
	}
	cl := b.cfg.classes[v]
	if cl == nil {
		b.c.add(path, 0, "%q is not a defined class", v)
	}
	return cl
}

func (b *builder) classes(m *Mesh) {
	for i, src := range m.Classes {
		p := index("classes", i)
		b.name(join(p, "name"), src.Name)
		cl := &Class{
			Name:             src.Name,
			Priority:         src.Priority,
			TTFT:             b.duration(join(p, "slo.ttft"), src.SLO.TTFT, false),
			TPOT:             b.duration(join(p, "slo.tpot"), src.SLO.TPOT, false),
			Preemptible:      src.Preemptible,
			MaxQueue:         src.Queue.MaxLength,
			MaxWait:          b.duration(join(p, "queue.max_wait"), src.Queue.MaxWait, false),
			AttainmentTarget: src.AttainmentTarget,
		}
		if src.SLO.TTFT == "0s" || src.SLO.TTFT == "0" {
			b.c.add(join(p, "slo.ttft"), 0, "%q must be positive (omit it for no objective)", src.SLO.TTFT)
		}
		if src.SLO.TPOT == "0s" || src.SLO.TPOT == "0" {
			b.c.add(join(p, "slo.tpot"), 0, "%q must be positive (omit it for no objective)", src.SLO.TPOT)
		}
		b.intRange(join(p, "queue.max_length"), src.Queue.MaxLength, 1, maxQueueLength)
		if !(src.AttainmentTarget > 0 && src.AttainmentTarget <= 1) {
			b.c.add(join(p, "attainment_target"), 0, "%v must be in (0, 1]", src.AttainmentTarget)
		}
		if src.Name != "" {
			if b.cfg.classes[src.Name] != nil {
				b.c.add(join(p, "name"), 0, "duplicate class %q", src.Name)
				continue
			}
			b.cfg.classes[src.Name] = cl
		}
		b.cfg.Classes = append(b.cfg.Classes, cl)
	}
	if m.DefaultClass == "" {
		b.c.add("default_class", 0, "is required when more than one class is defined")
		return
	}
	b.cfg.DefaultClass = b.cfg.classes[m.DefaultClass]
	if b.cfg.DefaultClass == nil {
		b.c.add("default_class", 0, "%q is not a defined class", m.DefaultClass)
	}
}

func (b *builder) scheduler(path string, s SchedulerSpec) SchedulerConfig {
	if !slices.Contains(knownPolicies, s.Policy) {
		b.c.add(join(path, "policy"), 0, "%q is not a known policy (known: %s)", s.Policy, strings.Join(knownPolicies, ", "))
	}
	out := SchedulerConfig{
		Policy:      s.Policy,
		BatchWindow: b.duration(join(path, "batch_window"), s.BatchWindow, false),
		Aging:       b.duration(join(path, "aging"), s.Aging, false),
	}
	if v := s.MaxPrefillTokens; v != nil {
		b.intRange(join(path, "max_prefill_tokens"), *v, 0, 1<<40)
		out.MaxPrefillTokens = *v
	}
	if v := s.ReserveUrgent; v != nil {
		b.intRange(join(path, "reserve_urgent"), *v, 0, maxInflight)
		out.ReserveUrgent = *v
	}
	if v := s.StaticBounds; v != nil {
		out.StaticBounds = *v
	}
	if v := s.OverloadRelease; v != nil {
		if !(*v == 0 || (*v >= 1 && *v <= 1e6)) { // also refuses NaN
			b.c.add(join(path, "overload_release"), 0, "%v must be 0 (never) or in [1, 1e6]", *v)
		}
		out.OverloadRelease = *v
		if *v == 0 {
			out.OverloadRelease = -1
		}
	}
	out.Preemption.MinRunTime = b.duration(join(path, "preemption.min_run_time"), s.Preemption.MinRunTime, false)
	if v := s.Preemption.MinLowerInflight; v != nil {
		b.intRange(join(path, "preemption.min_lower_inflight"), *v, 0, maxInflight)
		out.Preemption.MinLowerInflight = *v
	}
	if v := s.Preemption.MaxPerRequest; v != nil {
		b.intRange(join(path, "preemption.max_per_request"), *v, 0, maxPreemptCount)
		out.Preemption.MaxPerRequest = *v
	}
	out.Preemption.AbortProbe = b.duration(join(path, "preemption.abort_probe"), s.Preemption.AbortProbe, false)
	if v := s.Preemption.Target; v != nil {
		if !(*v > 0 && *v <= 1) { // also refuses NaN
			b.c.add(join(path, "preemption.target"), 0, "%v must be in (0, 1]", *v)
		}
		out.Preemption.Target = *v
	}
	return out
}

// validScheduler is a valid base for checking an arm's overrides alone.
var validScheduler = SchedulerSpec{
	Policy: defaultPolicy, BatchWindow: "0s", Aging: "0s",
	Preemption: PreemptionSpec{MinLowerInflight: new(int), MinRunTime: "0s", MaxPerRequest: new(int), Target: new(float64(defaultPreemptionTarget))},
}

// overlay returns base with the set fields of o.
func overlay(base, o SchedulerSpec) SchedulerSpec {
	if o.Policy != "" {
		base.Policy = o.Policy
	}
	if o.BatchWindow != "" {
		base.BatchWindow = o.BatchWindow
	}
	if o.Aging != "" {
		base.Aging = o.Aging
	}
	if o.MaxPrefillTokens != nil {
		base.MaxPrefillTokens = o.MaxPrefillTokens
	}
	if o.ReserveUrgent != nil {
		base.ReserveUrgent = o.ReserveUrgent
	}
	if o.StaticBounds != nil {
		base.StaticBounds = o.StaticBounds
	}
	if o.OverloadRelease != nil {
		base.OverloadRelease = o.OverloadRelease
	}
	if o.Preemption.MinLowerInflight != nil {
		base.Preemption.MinLowerInflight = o.Preemption.MinLowerInflight
	}
	if o.Preemption.MinRunTime != "" {
		base.Preemption.MinRunTime = o.Preemption.MinRunTime
	}
	if o.Preemption.MaxPerRequest != nil {
		base.Preemption.MaxPerRequest = o.Preemption.MaxPerRequest
	}
	if o.Preemption.Target != nil {
		base.Preemption.Target = o.Preemption.Target
	}
	if o.Preemption.AbortProbe != "" {
		base.Preemption.AbortProbe = o.Preemption.AbortProbe
	}
	return base
}

func (b *builder) pools(m *Mesh) {
	for i, src := range m.Pools {
		p := index("pools", i)
		b.name(join(p, "name"), src.Name)
		pool := &Pool{
			Name:              src.Name,
			Protocol:          Protocol(src.Protocol),
			ConnectTimeout:    b.duration(join(p, "connect_timeout"), src.ConnectTimeout, true),
			MaxInflight:       cmp.Or(deref(src.Capacity.MaxInflight), DefaultMaxInflight),
			MaxInflightTokens: src.Capacity.MaxInflightTokens,
			Scheduler:         b.scheduler(join(p, "scheduler"), src.Scheduler),
			EnginePriority:    cmp.Or(src.EnginePriority, enginePriorityStrip),

			AcceptUpstreamPick: src.AcceptUpstreamPick,
		}
		b.enginePriority(join(p, "engine_priority"), src.EnginePriority, m.Classes)
		pool.Resume = b.resume(join(p, "preemption.resume"), src.Preemption.Resume)
		if e := src.Ejection; e != nil {
			pool.Ejection = b.ejection(join(p, "ejection"), e)
		}
		if src.Protocol != ProtocolOpenAI && src.Protocol != ProtocolGRPC {
			b.c.add(join(p, "protocol"), 0, "%q must be %q or %q", src.Protocol, ProtocolOpenAI, ProtocolGRPC)
		}
		b.endpoints(p, src, pool)
		if src.AffinityHeader != "" {
			pool.AffinityHeader = b.header(join(p, "affinity_header"), src.AffinityHeader)
		}
		if pr := src.PrefixRouting; pr != nil {
			if w := pr.Weight; !(w > 0 && w <= 1e6) {
				b.c.add(join(p, "prefix_routing.weight"), 0, "%v must be above 0 and at most 1e6", w)
			}
			lo := 1
			if pr.KVEvents != nil {
				lo = 0
				pool.PrefixKVEvents = b.kvEvents(join(p, "prefix_routing.kv_events"), pr.KVEvents, src, pool)
			}
			b.intRange(join(p, "prefix_routing.capacity_blocks"), pr.CapacityBlocks, lo, prefixindex.MaxCapacity)
			pool.PrefixWeight, pool.PrefixCapacityBlocks = pr.Weight, pr.CapacityBlocks
		}
		if mi := src.Capacity.MaxInflight; mi != nil && *mi == 0 {
			b.c.add(join(p, "capacity.max_inflight"), 0, "0 would admit nothing: must be between 1 and %d (leave it out for the default, %d)", maxInflight, DefaultMaxInflight)
		} else if mi != nil {
			b.intRange(join(p, "capacity.max_inflight"), *mi, 1, maxInflight)
		}
		b.intRange(join(p, "capacity.max_inflight_tokens"), src.Capacity.MaxInflightTokens, 0, 1<<40)
		if mt := src.Capacity.Metrics; mt.URL != "" {
			mp := join(p, "capacity.metrics")
			u, err := url.Parse(mt.URL)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				b.c.add(join(mp, "url"), 0, "%q must be an http(s) URL", mt.URL)
			}
			ms := &MetricsSource{URL: mt.URL, Interval: b.duration(join(mp, "interval"), mt.Interval, true)}
			ms.StaleAfter = b.duration(join(mp, "stale_after"), mt.StaleAfter, false)
			if mt.StaleAfter == "" {
				ms.StaleAfter = 3 * ms.Interval
			}
			pool.Metrics = ms
		} else if mt.URLTemplate != "" {
			mp := join(p, "capacity.metrics")
			ms := &MetricsSource{Interval: b.duration(join(mp, "interval"), mt.Interval, true)}
			ms.StaleAfter = b.duration(join(mp, "stale_after"), mt.StaleAfter, false)
			if mt.StaleAfter == "" {
				ms.StaleAfter = 3 * ms.Interval
			}
			pool.Metrics = ms
		} else if mt.Interval != "" || mt.StaleAfter != "" {
			b.c.add(join(p, "capacity.metrics.url"), 0, "url or url_template is required when interval or stale_after is set")
		}
		if src.Name != "" {
			if b.cfg.pools[src.Name] != nil {
				b.c.add(join(p, "name"), 0, "duplicate pool %q", src.Name)
				continue
			}
			b.cfg.pools[src.Name] = pool
		}
		b.cfg.Pools = append(b.cfg.Pools, pool)
	}
}

// enginePriority checks a pool's engine_priority. With "class" every
// class's priority is written into requests, so it must fit the engine's
// field (llm.v1 GenerateRequest.priority is an int32).
func (b *builder) enginePriority(path, v string, classes []ClassSpec) {
	switch v {
	case "", enginePriorityStrip:
	case enginePriorityClass:
		for i, c := range classes {
			if c.Priority < math.MinInt32 || c.Priority > math.MaxInt32 {
				b.c.add(path, 0, "%q writes class priorities into an int32 engine field; classes[%d].priority = %d is out of range",
					v, i, c.Priority)
			}
		}
	default:
		b.c.add(path, 0, "%q must be %q or %q", v, enginePriorityStrip, enginePriorityClass)
	}
}

// resume checks a pool's preemption.resume; empty is the default
// "continue". An unknown value names the closest known one.
func (b *builder) resume(path, v string) string {
	if v == "" {
		return ResumeContinue
	}
	if !slices.Contains(KnownResume, v) {
		b.c.add(path, 0, "%q is not a known resume mode%s", v, suggestValue(v, KnownResume))
	}
	return v
}

func (b *builder) experimentsOf(m *Mesh) {
	srcPools := map[string]SchedulerSpec{}
	for _, p := range m.Pools {
		srcPools[p.Name] = p.Scheduler
	}
	for i, src := range m.Experiments {
		p := index("experiments", i)
		b.name(join(p, "name"), src.Name)
		e := &Experiment{Name: src.Name}
		if src.Pool == "" {
			b.c.add(join(p, "pool"), 0, "is required")
		} else if e.Pool = b.cfg.pools[src.Pool]; e.Pool == nil {
			b.c.add(join(p, "pool"), 0, "%q is not a defined pool", src.Pool)
		} else if e.Pool.Experiment != nil {
			b.c.add(join(p, "pool"), 0, "pool %q already has experiment %q", src.Pool, e.Pool.Experiment.Name)
		}
		if len(src.Arms) == 0 {
			b.c.add(join(p, "arms"), 0, "at least one arm is required")
		}
		seen := map[string]bool{}
		for j, a := range src.Arms {
			ap := index(join(p, "arms"), j)
			b.name(join(ap, "name"), a.Name)
			if seen[a.Name] {
				b.c.add(join(ap, "name"), 0, "duplicate arm %q", a.Name)
			}
			seen[a.Name] = true
			b.intRange(join(ap, "weight"), a.Weight, 0, maxArmWeight)
			arm := &Arm{
				Name:    a.Name,
				Weight:  a.Weight,
				Headers: b.headers(join(ap, "headers"), a.Headers),
			}
			// Report only the arm's own problems here: the inherited fields'
			// are reported once, at the pool.
			b.scheduler(join(ap, "scheduler"), overlay(validScheduler, a.Scheduler))
			arm.Scheduler = (&builder{cfg: b.cfg}).scheduler("", overlay(srcPools[src.Pool], a.Scheduler))
			if a.Weight > 0 {
				e.totalWeight += a.Weight
			}
			e.Arms = append(e.Arms, arm)
		}
		if src.Active != "" {
			if e.Active = e.Arm(src.Active); e.Active == nil {
				b.c.add(join(p, "active"), 0, "%q is not an arm of this experiment", src.Active)
			}
		}
		if src.Name != "" {
			if b.cfg.experiments[src.Name] != nil {
				b.c.add(join(p, "name"), 0, "duplicate experiment %q", src.Name)
				continue
			}
			b.cfg.experiments[src.Name] = e
		}
		if e.Pool != nil && e.Pool.Experiment == nil && len(e.Arms) > 0 {
			e.Pool.Experiment = e
		}
		b.cfg.Experiments = append(b.cfg.Experiments, e)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// ejection compiles a pool's ejection settings.
func (b *builder) ejection(path string, e *EjectionSpec) Ejection {
	out := Ejection{Failures: deref(e.Failures)}
	if f := e.Failures; f != nil && (*f < 1 || *f > maxEjectionFailures) {
		b.c.add(join(path, "failures"), 0, "%d must be between 1 and %d (leave it out for the default, 5)", *f, maxEjectionFailures)
	}
	if e.Base != "" {
		out.Base = b.duration(join(path, "base"), e.Base, true)
	}
	if e.Max != "" {
		out.Max = b.duration(join(path, "max"), e.Max, true)
	}
	if out.Base > 0 && out.Max > 0 && out.Max < out.Base {
		b.c.add(join(path, "max"), 0, "%q must be at least base (%s)", e.Max, e.Base)
	}
	return out
}

// maxEjectionFailures bounds pools[].ejection.failures.
const maxEjectionFailures = 1000
