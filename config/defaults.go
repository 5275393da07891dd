package config

import "fmt"

// Default values applied by applyDefaults. They are documented on the
// schema fields and in docs/config.md.
const (
	DefaultMaxInflight      = 64
	defaultMaxQueueLength   = 1024
	defaultAttainment       = 0.9
	defaultPolicy           = "fifo"
	defaultMinLowerInflight = 1
	defaultMaxPreemptions   = 3
	defaultPreemptionTarget = 1.0
	defaultAbortProbe       = "5m"
	DefaultRelocThreshold   = 4096
	DefaultRelocMax         = 16 << 20
	DefaultRelocMaxMessage  = 32 << 20
	DefaultRelocMaxBody     = 32 << 20
	defaultConnectTimeout   = "5s"
	defaultMetricsInterval  = "1s"
	defaultTenantHeader     = "x-tenant-id"
	defaultAPIKeyHeader     = "authorization"
	defaultServiceName      = "llmesh"
	defaultPrometheusPath   = "/metrics"
	defaultOTLPInterval     = "10s"
	defaultFailureMode      = "fail_open"
	defaultServiceTimeout   = "1s"
	// The shared scheduler service's transports (scheduler_service.transport).
	serviceTransportAuto   = "auto"
	serviceTransportGRPC   = "grpc"
	serviceTransportFramed = "framed"
	defaultRelocField      = "prompt"
	fieldTypeString        = "string"
	fieldTypeBytes         = "bytes"
	compressedRecompress   = "recompress"
	compressedRefuse       = "refuse"
	ProtocolOpenAI         = "openai"
	ProtocolGRPC           = "grpc"
	enginePriorityStrip    = "strip"
	enginePriorityClass    = "class"
	ResumeContinue         = "continue"
	ResumeRequeue          = "requeue"
	ResumeOff              = "off"
	failOpen               = "fail_open"
	failClosed             = "fail_closed"
)

// DefaultReportDelay is scheduler_service.report_delay's default
// (scheduler/client.DefaultReportDelay).
const DefaultReportDelay = "150us"

// KnownResume are the values of pools[].preemption.resume.
var KnownResume = []string{ResumeContinue, ResumeRequeue, ResumeOff}

// knownPolicies are the scheduler policy names the config accepts; the
// scheduler's registry must provide each of them.
var knownPolicies = []string{"fifo", "priority", "preemptive", "edf"}

// applyDefaults fills unset fields of m in place. It never fails: invalid
// values are left for Compile to report. Experiment arms are not defaulted
// here; their unset scheduler fields inherit the pool's at compile time.
func applyDefaults(m *Mesh) {
	if len(m.Classes) == 0 {
		m.Classes = []ClassSpec{{Name: "default"}}
	}
	if m.DefaultClass == "" && len(m.Classes) == 1 {
		m.DefaultClass = m.Classes[0].Name
	}
	for i := range m.Classes {
		c := &m.Classes[i]
		if c.Queue.MaxLength == 0 {
			c.Queue.MaxLength = defaultMaxQueueLength
		}
		if c.AttainmentTarget == 0 {
			c.AttainmentTarget = defaultAttainment
		}
	}
	for i := range m.Listeners {
		l := &m.Listeners[i]
		for j := range l.Routes {
			r := &l.Routes[j]
			if r.Name == "" {
				r.Name = fmt.Sprintf("route-%d", j)
			}
			if r.Match.PathPrefix == "" {
				r.Match.PathPrefix = "/"
			}
		}
	}
	for i := range m.Pools {
		p := &m.Pools[i]
		if p.ConnectTimeout == "" {
			p.ConnectTimeout = defaultConnectTimeout
		}
		if p.Capacity.MaxInflight == nil {
			n := DefaultMaxInflight
			p.Capacity.MaxInflight = &n
		}
		if (p.Capacity.Metrics.URL != "" || p.Capacity.Metrics.URLTemplate != "") && p.Capacity.Metrics.Interval == "" {
			p.Capacity.Metrics.Interval = defaultMetricsInterval
		}
		s := &p.Scheduler
		if s.Policy == "" {
			s.Policy = defaultPolicy
		}
		if s.BatchWindow == "" {
			s.BatchWindow = "0s"
		}
		if s.Aging == "" {
			s.Aging = "0s"
		}
		if s.Preemption.MinLowerInflight == nil {
			v := defaultMinLowerInflight
			s.Preemption.MinLowerInflight = &v
		}
		if s.Preemption.MinRunTime == "" {
			s.Preemption.MinRunTime = "0s"
		}
		if s.Preemption.MaxPerRequest == nil {
			v := defaultMaxPreemptions
			s.Preemption.MaxPerRequest = &v
		}
		if s.Preemption.Target == nil {
			v := defaultPreemptionTarget
			s.Preemption.Target = &v
		}
		if s.Preemption.AbortProbe == "" {
			s.Preemption.AbortProbe = defaultAbortProbe
		}
	}
	c := &m.Classification
	if c.TenantHeader == "" && len(c.Tenants) > 0 {
		c.TenantHeader = defaultTenantHeader
	}
	if c.APIKeyHeader == "" && len(c.APIKeys) > 0 {
		c.APIKeyHeader = defaultAPIKeyHeader
	}
	if m.Relocation.MaxMessage == 0 {
		m.Relocation.MaxMessage = DefaultRelocMaxMessage
	}
	if m.Relocation.MaxBody == 0 {
		m.Relocation.MaxBody = DefaultRelocMaxBody
	}
	for i := range m.Relocation.GRPC {
		r := &m.Relocation.GRPC[i]
		if r.Type == "" {
			r.Type = fieldTypeString
		}
		if r.Threshold == 0 {
			r.Threshold = DefaultRelocThreshold
		}
		if r.Max == 0 {
			r.Max = DefaultRelocMax
		}
		if r.Compressed == "" {
			r.Compressed = compressedRecompress
		}
	}
	for i := range m.Relocation.HTTP {
		r := &m.Relocation.HTTP[i]
		if r.Field == "" {
			r.Field = defaultRelocField
		}
		if r.Threshold == 0 {
			r.Threshold = DefaultRelocThreshold
		}
		if r.Max == 0 {
			r.Max = DefaultRelocMax
		}
	}
	t := &m.Telemetry
	if t.ServiceName == "" {
		t.ServiceName = defaultServiceName
	}
	if t.Prometheus.Path == "" {
		t.Prometheus.Path = defaultPrometheusPath
	}
	if t.OTLP.Endpoint != "" && t.OTLP.Interval == "" {
		t.OTLP.Interval = defaultOTLPInterval
	}
	if s := m.SchedulerService; s != nil {
		if s.FailureMode == "" {
			s.FailureMode = defaultFailureMode
		}
		if s.Timeout == "" {
			s.Timeout = defaultServiceTimeout
		}
		if s.Transport == "" {
			s.Transport = serviceTransportAuto
		}
		if s.ReportDelay == "" {
			s.ReportDelay = DefaultReportDelay
		}
	}
}
