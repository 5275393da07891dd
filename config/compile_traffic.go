package config

import (
	"net/netip"
	"slices"
	"strings"
	"time"
)

// This file compiles the traffic-facing sections: listeners and routes,
// classification, relocation, telemetry and the shared scheduler service.

func (b *builder) listenersOf(m *Mesh) {
	addrs := map[string]string{}
	for i, src := range m.Listeners {
		p := index("listeners", i)
		b.name(join(p, "name"), src.Name)
		l := &Listener{Name: src.Name, Address: src.Address}
		l.Host, l.Port = b.hostPort(join(p, "address"), src.Address, true)
		if prev, dup := addrs[src.Address]; dup && l.Port != 0 {
			b.c.add(join(p, "address"), 0, "%q is also the address of listener %q", src.Address, prev)
		}
		addrs[src.Address] = src.Name
		if src.Limits != nil {
			l.Limits = b.listenerLimits(join(p, "limits"), src.Limits)
		}
		l.DataPlane, l.ExtProc = b.dataPlane(p, &src)
		if len(src.Routes) == 0 {
			b.c.add(join(p, "routes"), 0, "at least one route is required")
		}
		names := map[string]bool{}
		for j, r := range src.Routes {
			rp := index(join(p, "routes"), j)
			b.name(join(rp, "name"), r.Name)
			if names[r.Name] {
				b.c.add(join(rp, "name"), 0, "duplicate route %q in listener %q", r.Name, src.Name)
			}
			names[r.Name] = true
			b.pathPrefix(join(rp, "match.path_prefix"), r.Match.PathPrefix)
			route := &Route{
				Name:       r.Name,
				ID:         src.Name + "/" + r.Name,
				PathPrefix: r.Match.PathPrefix,
				Headers:    b.headers(join(rp, "match.headers"), r.Match.Headers),
			}
			for k, g := range r.Generation {
				if !strings.HasPrefix(g, "/") || strings.ContainsAny(g, "?# \t") {
					b.c.add(index(join(rp, "generation"), k), 0, "%q must be a request path starting with / (no query)", g)
					continue
				}
				route.Generation = append(route.Generation, g)
			}
			if r.Pool == "" {
				b.c.add(join(rp, "pool"), 0, "is required")
			} else if route.Pool = b.cfg.pools[r.Pool]; route.Pool == nil {
				b.c.add(join(rp, "pool"), 0, "%q is not a defined pool", r.Pool)
			}
			if r.Class != "" {
				route.Class = b.classRef(join(rp, "class"), r.Class)
			}
			switch {
			case r.Experiment != "":
				route.Experiment = b.cfg.experiments[r.Experiment]
				if route.Experiment == nil {
					b.c.add(join(rp, "experiment"), 0, "%q is not a defined experiment", r.Experiment)
				} else if route.Pool != nil && route.Experiment.Pool != route.Pool {
					b.c.add(join(rp, "experiment"), 0, "experiment %q is on pool %q, not this route's pool %q", r.Experiment, m.experimentPool(r.Experiment), r.Pool)
				}
			case route.Pool != nil:
				route.Experiment = route.Pool.Experiment
			}
			l.Routes = append(l.Routes, route)
		}
		if src.Name != "" {
			if b.cfg.listeners[src.Name] != nil {
				b.c.add(join(p, "name"), 0, "duplicate listener %q", src.Name)
				continue
			}
			b.cfg.listeners[src.Name] = l
		}
		b.cfg.Listeners = append(b.cfg.Listeners, l)
	}
}

func (m *Mesh) experimentPool(name string) string {
	for _, e := range m.Experiments {
		if e.Name == name {
			return e.Pool
		}
	}
	return ""
}

func (b *builder) classification(m *Mesh) {
	src := m.Classification
	out := &b.cfg.Classification
	for i, r := range src.Rules {
		p := index("classification.rules", i)
		b.pathPrefix(join(p, "path_prefix"), r.PathPrefix)
		if r.PathPrefix == "" && r.Model == "" {
			b.c.add(p, 0, "needs path_prefix or model")
		}
		out.Rules = append(out.Rules, ClassRule{PathPrefix: r.PathPrefix, Model: r.Model, Class: b.classRef(join(p, "class"), r.Class)})
	}
	if src.TenantHeader != "" {
		out.TenantHeader = b.header("classification.tenant_header", src.TenantHeader)
	}
	for _, k := range sortedKeys(src.Tenants) {
		if out.Tenants == nil {
			out.Tenants = map[string]*Class{}
		}
		out.Tenants[k] = b.classRef(key("classification.tenants", k), src.Tenants[k])
	}
	if src.APIKeyHeader != "" {
		out.APIKeyHeader = b.header("classification.api_key_header", src.APIKeyHeader)
	}
	for _, k := range sortedKeys(src.APIKeys) {
		if out.APIKeys == nil {
			out.APIKeys = map[string]*Class{}
		}
		// Keys are secrets: the path names the class, never the key.
		if src.APIKeys[k] == "" || b.cfg.classes[src.APIKeys[k]] == nil {
			b.c.add("classification.api_keys", 0, "an API key maps to %q, which is not a defined class", src.APIKeys[k])
		}
		out.APIKeys[k] = b.cfg.classes[src.APIKeys[k]]
	}
	ph := src.PriorityHeader
	if ph.Name != "" {
		out.PriorityHeader = b.header("classification.priority_header.name", ph.Name)
	} else if len(ph.TrustedSources) > 0 || ph.TrustedMarker != nil {
		b.c.add("classification.priority_header.name", 0, "is required when trusted_sources or trusted_marker is set")
	}
	if tm := ph.TrustedMarker; tm != nil {
		b.trustedMarker(out, tm)
	}
	for i, s := range ph.TrustedSources {
		pfx, err := netip.ParsePrefix(s)
		if err != nil {
			if a, aerr := netip.ParseAddr(s); aerr == nil {
				pfx = netip.PrefixFrom(a, a.BitLen())
				err = nil
			}
		}
		if err != nil {
			b.c.add(index("classification.priority_header.trusted_sources", i), 0, "%q is not a CIDR prefix or IP address", s)
			continue
		}
		out.TrustedSources = append(out.TrustedSources, pfx.Masked())
	}
}

// trustedMarker compiles the marker. Its value is a secret: errors describe
// it, never quote it.
func (b *builder) trustedMarker(out *Classification, tm *TrustedMarkerSpec) {
	const p = "classification.priority_header.trusted_marker"
	if tm.Header == "" {
		b.c.add(join(p, "header"), 0, "is required")
	} else {
		out.TrustedMarkerHeader = b.header(join(p, "header"), tm.Header)
		if out.TrustedMarkerHeader == out.PriorityHeader {
			b.c.add(join(p, "header"), 0, "%q must differ from the priority header it vouches for", tm.Header)
		}
	}
	switch v := tm.Value; {
	case v == "":
		b.c.add(join(p, "value"), 0, "is required (an empty marker would trust everyone)")
	case strings.TrimSpace(v) != v:
		b.c.add(join(p, "value"), 0, "must not start or end with white space (HTTP strips it, so the marker would never match)")
	case strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		b.c.add(join(p, "value"), 0, "must not contain control characters (they are invalid in header values)")
	}
	out.TrustedMarkerValue = tm.Value
	if h, ok := parseSecretHash(tm.Value); ok {
		out.trustedMarkerHash = h
	} else if strings.HasPrefix(tm.Value, "sha256:") {
		b.c.add(join(p, "value"), 0, `a "sha256:" value must be followed by 64 hex digits`)
	}
	if out.TrustedMarkerHeader == "" || out.TrustedMarkerValue == "" {
		out.TrustedMarkerHeader, out.TrustedMarkerValue, out.trustedMarkerHash = "", "", nil
	}
}

func (b *builder) relocation(m *Mesh) {
	for i, r := range m.Relocation.GRPC {
		p := index("relocation.grpc", i)
		if r.Method != "" && (!strings.HasPrefix(r.Method, "/") || strings.Count(r.Method, "/") != 2) {
			b.c.add(join(p, "method"), 0, "%q must look like /package.Service/Method", r.Method)
		}
		if r.Metadata == "" {
			b.c.add(join(p, "metadata"), 0, "is required")
		} else if b.header(join(p, "metadata"), r.Metadata); r.Metadata != strings.ToLower(r.Metadata) {
			b.c.add(join(p, "metadata"), 0, "%q must be lower-case (gRPC metadata keys are)", r.Metadata)
		} else if strings.HasSuffix(r.Metadata, "-bin") && r.Type == fieldTypeString {
			b.c.add(join(p, "type"), 0, "%q: binary metadata %q needs type bytes", r.Type, r.Metadata)
		}
		b.intRange(join(p, "field"), r.Field, 1, maxGRPCField)
		if r.Field >= 19000 && r.Field <= 19999 {
			b.c.add(join(p, "field"), 0, "%d is in protobuf's reserved range 19000-19999", r.Field)
		}
		if r.Type != fieldTypeString && r.Type != fieldTypeBytes {
			b.c.add(join(p, "type"), 0, "%q must be %q or %q", r.Type, fieldTypeString, fieldTypeBytes)
		}
		if r.Compressed != compressedRecompress && r.Compressed != compressedRefuse {
			b.c.add(join(p, "compressed"), 0, "%q must be %q or %q", r.Compressed, compressedRecompress, compressedRefuse)
		}
		b.sizes(p, r.Threshold, r.Max)
		b.cfg.Relocation.GRPC = append(b.cfg.Relocation.GRPC, GRPCRelocation{
			Method: r.Method, Metadata: r.Metadata, Field: r.Field, Bytes: r.Type == fieldTypeBytes,
			Threshold: r.Threshold, Max: r.Max, Refuse: r.Compressed == compressedRefuse,
		})
	}
	for i, r := range m.Relocation.HTTP {
		p := index("relocation.http", i)
		b.pathPrefix(join(p, "path_prefix"), r.PathPrefix)
		h := ""
		if r.Header == "" {
			b.c.add(join(p, "header"), 0, "is required")
		} else {
			h = b.header(join(p, "header"), r.Header)
		}
		if r.Field == "" || strings.ContainsAny(r.Field, "\".\\") {
			b.c.add(join(p, "field"), 0, "%q must be a plain top-level JSON field name", r.Field)
		}
		b.sizes(p, r.Threshold, r.Max)
		b.cfg.Relocation.HTTP = append(b.cfg.Relocation.HTTP, HTTPRelocation{
			PathPrefix: r.PathPrefix, Header: h, Field: r.Field, Threshold: r.Threshold, Max: r.Max,
		})
	}
	b.relocationLimits(m)
}

// relocationLimits checks that each section-wide limit is positive and
// leaves room for the largest value its rules relocate; the rule named is
// the first with that largest max.
func (b *builder) relocationLimits(m *Mesh) {
	out := &b.cfg.Relocation
	out.MaxMessage, out.MaxBody = m.Relocation.MaxMessage, m.Relocation.MaxBody
	b.intRange("relocation.max_message", out.MaxMessage, 1, maxRelocBytes)
	b.intRange("relocation.max_body", out.MaxBody, 1, maxRelocBytes)
	check := func(field string, limit int, kind string, maxes []int) {
		at := -1
		for i, v := range maxes {
			if v > limit && (at < 0 || v > maxes[at]) {
				at = i
			}
		}
		if at >= 0 && limit > 0 {
			b.c.add("relocation."+field, 0, "%d is less than relocation.%s[%d].max %d: such a value could never fit (raise %s or lower the rule's max)", limit, kind, at, maxes[at], field)
		}
	}
	gm := make([]int, len(out.GRPC))
	for i, g := range out.GRPC {
		gm[i] = g.Max
	}
	hm := make([]int, len(out.HTTP))
	for i, h := range out.HTTP {
		hm[i] = h.Max
	}
	check("max_message", out.MaxMessage, "grpc", gm)
	check("max_body", out.MaxBody, "http", hm)
}

func (b *builder) sizes(p string, threshold, limit int) {
	b.intRange(join(p, "threshold"), threshold, 1, maxRelocBytes)
	b.intRange(join(p, "max"), limit, 1, maxRelocBytes)
	if limit < threshold {
		b.c.add(join(p, "max"), 0, "%d must be at least threshold %d", limit, threshold)
	}
}

func (b *builder) telemetry(m *Mesh) {
	t := m.Telemetry
	out := &b.cfg.Telemetry
	out.ServiceName = t.ServiceName
	out.ServerTiming = t.ServerTiming
	if t.Prometheus.Enabled {
		b.pathPrefix("telemetry.prometheus.path", t.Prometheus.Path)
		out.PrometheusPath = t.Prometheus.Path
	}
	if t.OTLP.Endpoint != "" {
		b.hostPort("telemetry.otlp.endpoint", t.OTLP.Endpoint, false)
		out.OTLPEndpoint = t.OTLP.Endpoint
		out.OTLPInsecure = t.OTLP.Insecure
		out.OTLPInterval = b.duration("telemetry.otlp.interval", t.OTLP.Interval, true)
	}
}

func (b *builder) service(m *Mesh) {
	s := m.SchedulerService
	if s == nil {
		return
	}
	if s.Address == "" {
		b.c.add("scheduler_service.address", 0, "is required")
	} else {
		b.hostPort("scheduler_service.address", s.Address, false)
	}
	if s.FailureMode != failOpen && s.FailureMode != failClosed {
		b.c.add("scheduler_service.failure_mode", 0, "%q must be %q or %q", s.FailureMode, failOpen, failClosed)
	}
	if s.Transport != serviceTransportAuto && s.Transport != serviceTransportGRPC && s.Transport != serviceTransportFramed {
		b.c.add("scheduler_service.transport", 0, "%q must be %q, %q or %q", s.Transport, serviceTransportAuto, serviceTransportGRPC, serviceTransportFramed)
	}
	delay := b.duration("scheduler_service.report_delay", s.ReportDelay, false)
	if delay > maxReportDelay {
		b.c.add("scheduler_service.report_delay", 0, "%q is over the limit of %s (a release may arrive that late)", s.ReportDelay, maxReportDelay)
	}
	if t := s.TLS; t != nil && (t.CertFile == "") != (t.KeyFile == "") {
		b.c.add("scheduler_service.tls.key_file", 0, "cert_file and key_file go together (a client certificate needs its key)")
	}
	b.cfg.SchedulerService = &SchedulerService{
		TLS:         s.TLS,
		TokenFile:   s.TokenFile,
		Address:     s.Address,
		FailOpen:    s.FailureMode == failOpen,
		Timeout:     b.duration("scheduler_service.timeout", s.Timeout, true),
		Transport:   s.Transport,
		ReportDelay: delay,
	}
}

// maxReportDelay bounds scheduler_service.report_delay: the service sees a
// release up to that late, so the slot stays taken that long.
const maxReportDelay = 10 * time.Millisecond

// listenerLimits compiles a listener's client limits: a duration is Go
// syntax or "off", a count is positive or -1 (off); omitted keeps the
// gateway's default (0).
func (b *builder) listenerLimits(p string, src *ListenerLimitsSpec) ListenerLimits {
	dur := func(name, v string) time.Duration {
		if v == "off" {
			return -1
		}
		return b.duration(join(p, name), v, false)
	}
	count := func(name string, v int64) {
		if v < -1 {
			b.c.add(join(p, name), 0, "%d must be positive, or -1 for no limit", v)
		}
	}
	count("body_budget_bytes", src.BodyBudgetBytes)
	if v := src.BodyBudgetBytes; v > 0 && v < 32<<10 {
		b.c.add(join(p, "body_budget_bytes"), 0, "%d must be at least 32768 (one read buffer), or -1 for no budget", v)
	}
	count("max_conns_per_client", int64(src.MaxConnsPerClient))
	count("max_streams_per_conn", int64(src.MaxStreamsPerConn))
	return ListenerLimits{
		BodyTimeout: dur("body_timeout", src.BodyTimeout), WriteTimeout: dur("write_timeout", src.WriteTimeout),
		IdleTimeout: dur("idle_timeout", src.IdleTimeout), BodyBudgetBytes: src.BodyBudgetBytes,
		MaxConnsPerClient: src.MaxConnsPerClient, MaxStreamsPerConn: src.MaxStreamsPerConn,
	}
}

// dataPlane compiles a listener's data_plane and ext_proc. Classes are
// compiled first: the picker's message timeout must outlast every class's
// queue.max_wait, or Envoy gives up on a request the picker still queues.
func (b *builder) dataPlane(p string, src *ListenerSpec) (string, *ExtProc) {
	dp := src.DataPlane
	switch {
	case dp == "":
		dp = DataPlaneGolang
	case !slices.Contains(knownDataPlanes, dp):
		b.c.add(join(p, "data_plane"), 0, "%q is not a known data plane (known: %s)%s", dp, strings.Join(knownDataPlanes, ", "), suggestValue(dp, knownDataPlanes))
		return DataPlaneGolang, nil
	}
	if dp != DataPlaneExtProc {
		if src.ExtProc != nil {
			b.c.add(join(p, "ext_proc"), 0, "is only used with data_plane: %s", DataPlaneExtProc)
		}
		return dp, nil
	}
	ep := join(p, "ext_proc")
	if src.ExtProc == nil {
		b.c.add(ep, 0, "is required with data_plane: %s (the picker's address)", DataPlaneExtProc)
		return dp, nil
	}
	x := &ExtProc{Address: src.ExtProc.Address, FailureModeAllow: src.ExtProc.FailureModeAllow}
	if x.Address == "" {
		b.c.add(join(ep, "address"), 0, "is required")
	} else {
		x.Host, x.Port = b.hostPort(join(ep, "address"), x.Address, false)
	}
	// The longest bounded class wait, and the class that has it.
	var longest time.Duration
	var longestClass string
	for _, c := range b.cfg.Classes {
		if c.MaxWait > longest {
			longest, longestClass = c.MaxWait, c.Name
		}
	}
	tp := join(ep, "message_timeout")
	if src.ExtProc.MessageTimeout == "" {
		x.MessageTimeout = max(DefaultExtProcMessageTimeout, longest+time.Second)
		if x.MessageTimeout > maxExtProcMessageTimeout {
			b.c.add(tp, 0, "the default (class %q queue.max_wait %s plus 1s) is over Envoy's limit of %s: shorten that max_wait", longestClass, longest, maxExtProcMessageTimeout)
		}
	} else {
		x.MessageTimeout = b.duration(tp, src.ExtProc.MessageTimeout, true)
		switch {
		case x.MessageTimeout > maxExtProcMessageTimeout:
			b.c.add(tp, 0, "%q is over Envoy's limit of %s", src.ExtProc.MessageTimeout, maxExtProcMessageTimeout)
		case x.MessageTimeout > 0 && x.MessageTimeout <= longest:
			b.c.add(tp, 0, "%q must be longer than class %q queue.max_wait %s: Envoy would give up on a request the picker still queues", src.ExtProc.MessageTimeout, longestClass, longest)
		}
	}
	if t := src.ExtProc.TLS; t != nil {
		tp := join(ep, "tls")
		if t.CAFile == "" {
			b.c.add(join(tp, "ca_file"), 0, "is required: Envoy verifies the picker's certificate against it")
		}
		if (t.CertFile == "") != (t.KeyFile == "") {
			b.c.add(join(tp, "cert_file"), 0, "cert_file and key_file go together")
		}
		tls := *t
		x.TLS = &tls
	}
	return dp, x
}
