package config

import "fmt"

// Default values applied by ApplyDefaults. They are documented on the
// schema fields and in docs/config.md.
const (
	DefaultMaxInflight      = 64
	DefaultMaxQueueLength   = 1024
	DefaultAttainment       = 0.9
	DefaultPolicy           = "fifo"
	DefaultMinLowerInflight = 1
	DefaultMaxPreemptions   = 3
	DefaultPreemptionTarget = 1.0
	DefaultAbortProbe       = "5m"
	DefaultRelocThreshold   = 4096
	DefaultRelocMax         = 16 << 20
	DefaultRelocMaxMessage  = 32 << 20
	DefaultRelocMaxBody     = 32 << 20
	DefaultConnectTimeout   = "5s"
	DefaultMetricsInterval  = "1s"
	DefaultTenantHeader     = "x-tenant-id"
	DefaultAPIKeyHeader     = "authorization"
	DefaultServiceName      = "llmesh"
	DefaultPrometheusPath   = "/metrics"
	DefaultOTLPInterval     = "10s"
	DefaultFailureMode      = "fail_open"
	DefaultServiceTimeout   = "1s"
	// The shared scheduler service's transports (scheduler_service.transport).
	ServiceTransportAuto   = "auto"
	ServiceTransportGRPC   = "grpc"
	ServiceTransportFramed = "framed"
	DefaultRelocField      = "prompt"
	FieldTypeString        = "string"
	FieldTypeBytes         = "bytes"
	CompressedRecompress   = "recompress"
	CompressedRefuse       = "refuse"
	ProtocolOpenAI         = "openai"
	ProtocolGRPC           = "grpc"
	EnginePriorityStrip    = "strip"
	EnginePriorityClass    = "class"
	ResumeContinue         = "continue"
	ResumeRequeue          = "requeue"
	ResumeOff              = "off"
	FailOpen               = "fail_open"
	FailClosed             = "fail_closed"
)

// DefaultReportDelay is scheduler_service.report_delay's default
// (scheduler/client.DefaultReportDelay).
const DefaultReportDelay = "150us"

// KnownResume are the values of pools[].preemption.resume.
var KnownResume = []string{ResumeContinue, ResumeRequeue, ResumeOff}

// KnownPolicies are the scheduler policy names the config accepts; the
// scheduler's registry must provide each of them.
var KnownPolicies = []string{"fifo", "priority", "preemptive", "edf"}

// ApplyDefaults fills unset fields of m in place. It never fails: invalid
// values are left for Compile to report. Experiment arms are not defaulted
// here; their unset scheduler fields inherit the pool's at compile time.
func ApplyDefaults(m *Mesh) {
	if len(m.Classes) == 0 {
		m.Classes = []ClassSpec{{Name: "default"}}
	}
	if m.DefaultClass == "" && len(m.Classes) == 1 {
		m.DefaultClass = m.Classes[0].Name
	}
	for i := range m.Classes {
		c := &m.Classes[i]
		if c.Queue.MaxLength == 0 {
			c.Queue.MaxLength = DefaultMaxQueueLength
		}
		if c.AttainmentTarget == 0 {
			c.AttainmentTarget = DefaultAttainment
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
			p.ConnectTimeout = DefaultConnectTimeout
		}
		if p.Capacity.MaxInflight == nil {
			n := DefaultMaxInflight
			p.Capacity.MaxInflight = &n
		}
		if (p.Capacity.Metrics.URL != "" || p.Capacity.Metrics.URLTemplate != "") && p.Capacity.Metrics.Interval == "" {
			p.Capacity.Metrics.Interval = DefaultMetricsInterval
		}
		s := &p.Scheduler
		if s.Policy == "" {
			s.Policy = DefaultPolicy
		}
		if s.BatchWindow == "" {
			s.BatchWindow = "0s"
		}
		if s.Aging == "" {
			s.Aging = "0s"
		}
		if s.Preemption.MinLowerInflight == nil {
			v := DefaultMinLowerInflight
			s.Preemption.MinLowerInflight = &v
		}
		if s.Preemption.MinRunTime == "" {
			s.Preemption.MinRunTime = "0s"
		}
		if s.Preemption.MaxPerRequest == nil {
			v := DefaultMaxPreemptions
			s.Preemption.MaxPerRequest = &v
		}
		if s.Preemption.Target == nil {
			v := DefaultPreemptionTarget
			s.Preemption.Target = &v
		}
		if s.Preemption.AbortProbe == "" {
			s.Preemption.AbortProbe = DefaultAbortProbe
		}
	}
	c := &m.Classification
	if c.TenantHeader == "" && len(c.Tenants) > 0 {
		c.TenantHeader = DefaultTenantHeader
	}
	if c.APIKeyHeader == "" && len(c.APIKeys) > 0 {
		c.APIKeyHeader = DefaultAPIKeyHeader
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
			r.Type = FieldTypeString
		}
		if r.Threshold == 0 {
			r.Threshold = DefaultRelocThreshold
		}
		if r.Max == 0 {
			r.Max = DefaultRelocMax
		}
		if r.Compressed == "" {
			r.Compressed = CompressedRecompress
		}
	}
	for i := range m.Relocation.HTTP {
		r := &m.Relocation.HTTP[i]
		if r.Field == "" {
			r.Field = DefaultRelocField
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
		t.ServiceName = DefaultServiceName
	}
	if t.Prometheus.Path == "" {
		t.Prometheus.Path = DefaultPrometheusPath
	}
	if t.OTLP.Endpoint != "" && t.OTLP.Interval == "" {
		t.OTLP.Interval = DefaultOTLPInterval
	}
	if s := m.SchedulerService; s != nil {
		if s.FailureMode == "" {
			s.FailureMode = DefaultFailureMode
		}
		if s.Timeout == "" {
			s.Timeout = DefaultServiceTimeout
		}
		if s.Transport == "" {
			s.Transport = ServiceTransportAuto
		}
		if s.ReportDelay == "" {
			s.ReportDelay = DefaultReportDelay
		}
	}
}
