package config

// This file holds the mesh config as written in YAML (the source form).
// Durations are Go duration strings and stay strings here so that validation
// can quote the bad value with its field path; Compile turns them into
// time.Duration in the runtime form (compiled.go).

// Mesh is the whole mesh config file.
type Mesh struct {
	// Listeners are where the data plane (gateway or Envoy) accepts traffic.
	Listeners []ListenerSpec `yaml:"listeners,omitempty"`
	// Pools are the upstreams (engines or clusters of them).
	Pools []PoolSpec `yaml:"pools,omitempty"`
	// Classes are the priority classes with their SLOs. When none are given a
	// single class "default" (priority 0) is created.
	Classes []ClassSpec `yaml:"classes,omitempty"`
	// DefaultClass names the class of requests nothing else classified, and
	// the fallback for unknown or untrusted class claims. Required when more
	// than one class exists.
	DefaultClass string `yaml:"default_class,omitempty"`
	// Classification maps trusted request attributes to classes.
	Classification ClassificationSpec `yaml:"classification,omitempty"`
	// Relocation moves oversized prompts from metadata/headers into bodies.
	Relocation RelocationSpec `yaml:"relocation,omitempty"`
	// Telemetry configures metrics and traces export.
	Telemetry TelemetrySpec `yaml:"telemetry,omitempty"`
	// SchedulerService, when set, makes hosts use the shared scheduler
	// service instead of an in-process scheduler.
	SchedulerService *SchedulerServiceSpec `yaml:"scheduler_service,omitempty"`
	// Experiments are A/B comparisons of scheduler configs.
	Experiments []ExperimentSpec `yaml:"experiments,omitempty"`
	// Admin is the admin listener of the host reading this config.
	Admin AdminSpec `yaml:"admin,omitempty"`
}

// ListenerSpec is one data-plane listener.
type ListenerSpec struct {
	// Name is unique among listeners.
	Name string `yaml:"name"`
	// Address is host:port, for example "127.0.0.1:8080".
	Address string `yaml:"address"`
	// Routes are tried in order; the first match wins.
	Routes []RouteSpec `yaml:"routes,omitempty"`
	// Limits bound what clients of this listener can hold in the embedded
	// gateway (llmesh gateway); Envoy applies its own (docs/security.md).
	Limits *ListenerLimitsSpec `yaml:"limits,omitempty"`
	// DataPlane is the filter llmesh control puts on this listener of its
	// Envoy nodes: "golang" (default: the llmesh golang filter, which needs
	// a contrib Envoy) or "ext_proc" (a standard Envoy's ext_proc filter
	// asking an endpoint picker, llmesh epp, for each request's endpoint;
	// docs/epp.md). The embedded gateway ignores it.
	DataPlane string `yaml:"data_plane,omitempty"`
	// ExtProc is the endpoint picker an ext_proc listener calls; required
	// with data_plane ext_proc, refused otherwise.
	ExtProc *ExtProcSpec `yaml:"ext_proc,omitempty"`
}

// ExtProcSpec is how Envoy reaches the endpoint picker of an ext_proc
// listener.
type ExtProcSpec struct {
	// Address is the picker's gRPC host:port (llmesh epp --listen).
	Address string `yaml:"address"`
	// FailureModeAllow lets Envoy send a request on (to no picked
	// endpoint: the request then fails upstream) when the picker cannot be
	// reached or errs, instead of answering 500; default false.
	FailureModeAllow bool `yaml:"failure_mode_allow,omitempty"`
	// MessageTimeout bounds how long Envoy waits for each picker answer,
	// which includes the request's wait in the picker's queue; default
	// 30s, or longer than the longest class queue.max_wait.
	MessageTimeout string `yaml:"message_timeout,omitempty"`
	// TLS, when set, makes Envoy reach the picker over TLS.
	TLS *ExtProcTLSSpec `yaml:"tls,omitempty"`
}

// ExtProcTLSSpec is how Envoy verifies the picker and proves itself to it.
// The files are paths on the Envoy node: Envoy reads them, not llmesh.
type ExtProcTLSSpec struct {
	// CAFile is the PEM bundle that signs the picker's certificate;
	// required (Envoy verifies nothing without one).
	CAFile string `yaml:"ca_file"`
	// CertFile and KeyFile are Envoy's client certificate and key, for a
	// picker that requires them; both or neither.
	CertFile string `yaml:"cert_file,omitempty"`
	KeyFile  string `yaml:"key_file,omitempty"`
	// ServerName is the SNI and the name the picker's certificate must
	// carry; empty: the host of address.
	ServerName string `yaml:"server_name,omitempty"`
}

// ListenerLimitsSpec bounds what clients can hold; an omitted field keeps
// the gateway's default (docs/security.md), and "off" (durations) or -1
// (counts) turns one off.
type ListenerLimitsSpec struct {
	// BodyTimeout bounds the reading of one request body (default 30s).
	BodyTimeout string `yaml:"body_timeout,omitempty"`
	// BodyBudgetBytes bounds the request body bytes buffered at once over
	// all requests (default 64 MiB); past it a request gets 429.
	BodyBudgetBytes int64 `yaml:"body_budget_bytes,omitempty"`
	// WriteTimeout bounds each write toward a client (default 30s): a
	// client that stops reading loses its stream and its slot.
	WriteTimeout string `yaml:"write_timeout,omitempty"`
	// IdleTimeout closes kept-alive client connections idle this long
	// (default 2m).
	IdleTimeout string `yaml:"idle_timeout,omitempty"`
	// MaxConnsPerClient bounds one client address's connections (256).
	MaxConnsPerClient int `yaml:"max_conns_per_client,omitempty"`
	// MaxStreamsPerConn bounds one h2c connection's concurrent streams (100).
	MaxStreamsPerConn int `yaml:"max_streams_per_conn,omitempty"`
}

// RouteSpec sends matching requests to a pool, optionally in a class.
type RouteSpec struct {
	// Name is unique within its listener; defaults to "route-<index>".
	Name string `yaml:"name,omitempty"`
	// Match selects requests; an empty match matches everything.
	Match MatchSpec `yaml:"match,omitempty"`
	// Pool is the upstream; required.
	Pool string `yaml:"pool"`
	// Class, when set, is the class of every request on this route (trusted
	// configuration, so it wins over classification rules).
	Class string `yaml:"class,omitempty"`
	// Experiment, when set, names the experiment whose arms split this
	// route's traffic. Defaults to the experiment on the route's pool, if any.
	Experiment string `yaml:"experiment,omitempty"`
	// Generation lists the request paths (HTTP paths, gRPC method paths
	// such as /llm.v1.Generation/Generate) that are generation calls on
	// this route: only those are scheduled and measured as generations;
	// every other request is proxied without admission and recorded apart.
	// Empty: /v1/completions, /v1/chat/completions and the llm.v1 and
	// vLLM gRPC generation methods. Add /v1/embeddings here to schedule
	// embeddings.
	Generation []string `yaml:"generation,omitempty"`
}

// MatchSpec selects requests by path prefix and exact header values.
type MatchSpec struct {
	// PathPrefix must start with "/"; empty means "/".
	PathPrefix string `yaml:"path_prefix,omitempty"`
	// Headers must all be present with exactly these values.
	Headers map[string]string `yaml:"headers,omitempty"`
}

// PoolSpec is one upstream.
type PoolSpec struct {
	// Name is unique among pools.
	Name string `yaml:"name"`
	// Protocol is "openai" (HTTP/1.1, SSE) or "grpc" (HTTP/2).
	Protocol string `yaml:"protocol"`
	// Endpoints are the engine replicas: host:port, or a mapping with
	// per-endpoint settings (EndpointSpec).
	Endpoints []EndpointSpec `yaml:"endpoints"`
	// ConnectTimeout for upstream connections; default "5s".
	ConnectTimeout string `yaml:"connect_timeout,omitempty"`
	// Capacity bounds what is in flight to the pool.
	Capacity CapacitySpec `yaml:"capacity,omitempty"`
	// Scheduler is the pool's scheduling policy and parameters.
	Scheduler SchedulerSpec `yaml:"scheduler,omitempty"`
	// EnginePriority is what the hosts write into the engine priority of a
	// request from a source not trusted for priority (OpenAI body
	// "priority", llm.v1 GenerateRequest.priority): "strip" removes it, so
	// the engine applies its default (safe with every engine); "class"
	// replaces it with the priority of the request's class, for engines
	// that order their own waiting queue by it (vLLM --scheduling-policy
	// priority). A trusted source's value passes either way. Empty means
	// "strip" (left empty by applyDefaults, so that configs written before
	// the field existed serialize as they did).
	EnginePriority string `yaml:"engine_priority,omitempty"`
	// AffinityHeader names a request header (a session id, a prompt-prefix
	// hash) whose value keeps requests on the same endpoint while it has
	// room, so a conversation stays where its KV cache is; empty means
	// none (the least loaded endpoint).
	AffinityHeader string `yaml:"affinity_header,omitempty"`
	// PrefixRouting makes the endpoint picker prefer the endpoint that was
	// sent a request's leading prompt blocks before (its KV cache likely
	// holds them); absent means off. Only requests that carry their
	// prompt's block hashes (the scheduler service's Start.blocks) are
	// routed by it.
	PrefixRouting *PrefixRoutingSpec `yaml:"prefix_routing,omitempty"`
	// Preemption is what a host does with the pool's streams that are
	// preempted after they sent bytes to the client.
	Preemption PoolPreemptionSpec `yaml:"preemption,omitempty"`
	// Ejection leaves an endpoint out of the picker for a while after it
	// failed (scheduler/eject.go); absent: the defaults.
	Ejection *EjectionSpec `yaml:"ejection,omitempty"`
	// AcceptUpstreamPick makes the hosts send a request that arrives with
	// an endpoint already picked by an endpoint picker in front of them
	// (x-gateway-destination-endpoint, or Envoy's envoy.lb dynamic
	// metadata) to that endpoint, admitted against its limits; default
	// false: a client must not choose its replica, and the header is
	// ignored.
	AcceptUpstreamPick bool `yaml:"accept_upstream_pick,omitempty"`
}

// EjectionSpec tunes outcome-based ejection (scheduler.Ejection).
type EjectionSpec struct {
	// Failures is how many failed requests in a row eject an endpoint (a
	// refused connection ejects it at once); at least 1, default 5.
	Failures *int `yaml:"failures,omitempty"`
	// Base is the first ejection's length, doubled for each ejection in a
	// row; positive, default 2s.
	Base string `yaml:"base,omitempty"`
	// Max bounds the doubled length; at least base, default 30s (base
	// when base is longer).
	Max string `yaml:"max,omitempty"`
}

// PrefixRoutingSpec weighs an endpoint's likely prefix-cache hit against
// its load (scheduler.PrefixRouting).
type PrefixRoutingSpec struct {
	// Weight is what a full match is worth in the picker's load score (1:
	// one endpoint's whole slot count); above 0.
	Weight float64 `yaml:"weight"`
	// CapacityBlocks is how many prompt blocks the picker remembers per
	// endpoint: the engine's KV cache in blocks (kv cache tokens / block
	// size); at least 1. With kv_events it is optional and bounds each
	// endpoint's exact set instead.
	CapacityBlocks int `yaml:"capacity_blocks,omitempty"`
	// KVEvents makes the index precise: each endpoint's blocks are what
	// its engine publishes in its KV-cache events (vLLM's
	// --kv-events-config), not a guess from where requests went. Absent:
	// the approximate index.
	KVEvents *KVEventsSpec `yaml:"kv_events,omitempty"`
}

// KVEventsSpec names each endpoint's KV-cache event publisher.
type KVEventsSpec struct {
	// Topic is the subscription topic (a prefix, as ZMQ matches it); empty
	// receives every topic.
	Topic string `yaml:"topic,omitempty"`
	// Endpoints maps every endpoint's address, as written in endpoints,
	// to its engine's ZMQ PUB address, tcp://HOST:PORT.
	Endpoints map[string]string `yaml:"endpoints"`
}

// PoolPreemptionSpec is a pool's handling of mid-stream preemption.
type PoolPreemptionSpec struct {
	// Resume is "continue" (default: the gateway continues the stream with
	// a continuation request and checks that the engine continued),
	// "requeue" (the stream ends with a retryable error event) or "off"
	// (a stream that sent a byte ignores preemption and runs to its end).
	// Empty means "continue" (left empty by applyDefaults).
	Resume string `yaml:"resume,omitempty"`
}

// CapacitySpec bounds the pool's in-flight work.
type CapacitySpec struct {
	// MaxInflight is the number of sequences in flight, at least 1; nil
	// (absent) means the default, 64. A pointer so that an explicit 0,
	// which would admit nothing, is refused instead of read as absent.
	MaxInflight *int `yaml:"max_inflight,omitempty"`
	// MaxInflightTokens bounds prompt+max tokens in flight; 0 means no bound.
	MaxInflightTokens int `yaml:"max_inflight_tokens,omitempty"`
	// Metrics, when its URL is set, learns capacity from the engine's
	// Prometheus endpoint.
	Metrics MetricsSpec `yaml:"metrics,omitempty"`
}

// MetricsSpec is the engine /metrics scrape used as a capacity signal.
type MetricsSpec struct {
	// URL of the engine's Prometheus endpoint; empty disables scraping.
	URL string `yaml:"url,omitempty"`
	// Interval between scrapes; default "1s".
	Interval string `yaml:"interval,omitempty"`
	// StaleAfter: older samples are ignored; default three intervals.
	StaleAfter string `yaml:"stale_after,omitempty"`
	// URLTemplate learns each endpoint's limit and load from its own
	// engine: {endpoint} is replaced by the endpoint's host:port
	// ("http://{endpoint}/metrics"). An endpoint's metrics_url overrides
	// it. Exclusive with URL.
	URLTemplate string `yaml:"url_template,omitempty"`
}

// SchedulerSpec is a scheduling policy and its parameters. In an experiment arm
// the set fields override the pool's.
type SchedulerSpec struct {
	// Policy is one of fifo, priority, preemptive, edf; default "fifo".
	Policy string `yaml:"policy,omitempty"`
	// BatchWindow > 0 releases admissions together every window; default
	// "0s" (continuous).
	BatchWindow string `yaml:"batch_window,omitempty"`
	// Aging raises a waiting request's effective priority by one level per
	// Aging of waiting (priority policies); "0s" disables aging.
	Aging string `yaml:"aging,omitempty"`
	// MaxPrefillTokens bounds the prompt tokens admitted but not yet
	// prefilled (no first token seen) for every class but the most urgent;
	// default 0 (no bound). See docs/scheduling.md.
	MaxPrefillTokens *int `yaml:"max_prefill_tokens,omitempty"`
	// ReserveUrgent is the number of the pool's slots only the most urgent
	// class may take; default 0.
	ReserveUrgent *int `yaml:"reserve_urgent,omitempty"`
	// StaticBounds keeps max_prefill_tokens and reserve_urgent as given,
	// 0 meaning off, on a preemptive pool too; default false: a
	// preemptive pool derives each bound left at 0 (and its preemption
	// budget) from the traffic it observes. See docs/scheduling.md.
	StaticBounds *bool `yaml:"static_bounds,omitempty"`
	// OverloadRelease is the factor of the overload release: the derived
	// bounds give way while a less urgent request has waited more than
	// this many times its class's TTFT objective; default 10, 0: never
	// (the urgent class keeps its bounds however far the others fall
	// behind). See docs/scheduling.md.
	OverloadRelease *float64 `yaml:"overload_release,omitempty"`
	// Preemption parameters (policy preemptive).
	Preemption PreemptionSpec `yaml:"preemption,omitempty"`
}

// PreemptionSpec holds the preemption guard rails. Pointers tell "unset" (take
// the pool's or the default) from an explicit zero.
type PreemptionSpec struct {
	// MinLowerInflight is the minimum number of strictly-lower-priority
	// in-flight requests before preempting; default 1.
	MinLowerInflight *int `yaml:"min_lower_inflight,omitempty"`
	// MinRunTime: requests younger than this are not preempted; default "0s".
	MinRunTime string `yaml:"min_run_time,omitempty"`
	// MaxPerRequest: after this many preemptions a request becomes
	// non-preemptible; default 3.
	MaxPerRequest *int `yaml:"max_per_request,omitempty"`
	// Target is the share of a waiting request's class TTFT objective that
	// its predicted TTFT may reach before preemption starts, in (0, 1];
	// default 1 (protect the objective itself). Lower values keep urgent
	// requests nearer their unloaded TTFT at the cost of more preemptions.
	Target *float64 `yaml:"target,omitempty"`
	// AbortProbe: after the pool is marked "abort not honoured" (its engine
	// kept a preempted request running), wait this long, then try one
	// probe preemption; honoured lifts the mark, not honoured doubles the
	// wait (up to 16×). Default "5m"; "0s" never probes (the mark stays
	// until a restart or reload).
	AbortProbe string `yaml:"abort_probe,omitempty"`
}

// ClassSpec is a priority class.
type ClassSpec struct {
	// Name is unique among classes.
	Name string `yaml:"name"`
	// Priority follows vLLM: a LOWER value is served first.
	Priority int `yaml:"priority"`
	// SLO is the class's latency objective; zero durations mean none.
	SLO SLOSpec `yaml:"slo,omitempty"`
	// Preemptible lets the preemptive policy stop this class's requests;
	// default false.
	Preemptible bool `yaml:"preemptible,omitempty"`
	// Queue limits the class's waiting requests.
	Queue QueueSpec `yaml:"queue,omitempty"`
	// AttainmentTarget is the share of requests that should meet the SLO,
	// in (0, 1]; default 0.9.
	AttainmentTarget float64 `yaml:"attainment_target,omitempty"`
}

// SLOSpec is a latency objective per request.
type SLOSpec struct {
	// TTFT is the time-to-first-token objective.
	TTFT string `yaml:"ttft,omitempty"`
	// TPOT is the time-per-output-token objective.
	TPOT string `yaml:"tpot,omitempty"`
}

// QueueSpec limits a class's queue.
type QueueSpec struct {
	// MaxLength: more waiting requests are rejected with queue full;
	// default 1024.
	MaxLength int `yaml:"max_length,omitempty"`
	// MaxWait: requests waiting longer are rejected; "0s" (default) means
	// no limit.
	MaxWait string `yaml:"max_wait,omitempty"`
}

// ClassificationSpec maps trusted request attributes to classes. Precedence:
// route class, API key, tenant, trusted priority header, rules, default.
type ClassificationSpec struct {
	// Rules are tried in order; the first match sets the class.
	Rules []RuleSpec `yaml:"rules,omitempty"`
	// TenantHeader names the header carrying the tenant; default
	// "x-tenant-id" when Tenants is not empty.
	TenantHeader string `yaml:"tenant_header,omitempty"`
	// Tenants maps tenant → class.
	Tenants map[string]string `yaml:"tenants,omitempty"`
	// APIKeyHeader names the header carrying the API key; default
	// "authorization" (a "Bearer " prefix is stripped).
	APIKeyHeader string `yaml:"api_key_header,omitempty"`
	// APIKeys maps API key → class.
	APIKeys map[string]string `yaml:"api_keys,omitempty"`
	// PriorityHeader lets trusted clients pick their class by name.
	PriorityHeader PriorityHeaderSpec `yaml:"priority_header,omitempty"`
}

// RuleSpec classifies by path prefix and/or model.
type RuleSpec struct {
	// PathPrefix, when set, must prefix the request path.
	PathPrefix string `yaml:"path_prefix,omitempty"`
	// Model, when set, must equal the request's model.
	Model string `yaml:"model,omitempty"`
	// Class is the class of matching requests; required.
	Class string `yaml:"class"`
}

// PriorityHeaderSpec is a client-set class header honoured only from trusted
// peers.
type PriorityHeaderSpec struct {
	// Name of the header; empty disables the feature.
	Name string `yaml:"name,omitempty"`
	// TrustedSources are CIDR prefixes of peers whose header is honoured;
	// from anyone else it is ignored (default class or other rules apply).
	TrustedSources []string `yaml:"trusted_sources,omitempty"`
	// TrustedMarker, when set, also honours the header on requests that
	// carry the marker: a trusted upstream hop (which strips the marker
	// from its own clients) sets it, so the header can be trusted when the
	// peer address cannot (for example behind a load balancer).
	TrustedMarker *TrustedMarkerSpec `yaml:"trusted_marker,omitempty"`
}

// TrustedMarkerSpec is a header a trusted hop adds with a shared secret
// value. The value is compared in constant time and never printed in
// errors.
type TrustedMarkerSpec struct {
	// Header is the marker's header name; required.
	Header string `yaml:"header"`
	// Value is the shared secret; required (an empty marker would trust
	// everyone).
	Value string `yaml:"value"`
}

// RelocationSpec holds the rules for oversized prompts.
type RelocationSpec struct {
	// GRPC rules move a metadata value into a request message field.
	GRPC []GRPCRelocationSpec `yaml:"grpc,omitempty"`
	// HTTP rules move a header value into the JSON body.
	HTTP []HTTPRelocationSpec `yaml:"http,omitempty"`
	// MaxMessage bounds the first gRPC request message after relocation
	// (decompressed), in bytes; default 32 MiB. It must be at least every
	// gRPC rule's Max.
	MaxMessage int `yaml:"max_message,omitempty"`
	// MaxBody bounds a JSON request body after relocation, in bytes (the
	// host also reads at most this much of the body); default 32 MiB. It
	// must be at least every HTTP rule's Max.
	MaxBody int `yaml:"max_body,omitempty"`
}

// GRPCRelocationSpec moves the value of metadata key Metadata into field Field
// of the request message.
type GRPCRelocationSpec struct {
	// Method, when set, is the full gRPC method ("/pkg.Svc/Method") the rule
	// applies to; empty means every method.
	Method string `yaml:"method,omitempty"`
	// Metadata is the (lower-case) metadata key; required.
	Metadata string `yaml:"metadata"`
	// Field is the protobuf field number in the top-level request message.
	Field int `yaml:"field"`
	// Type is "string" (default) or "bytes".
	Type string `yaml:"type,omitempty"`
	// Threshold: values of at least this many bytes are relocated; default
	// 4096.
	Threshold int `yaml:"threshold,omitempty"`
	// Max: larger values are refused; default 16 MiB.
	Max int `yaml:"max,omitempty"`
	// Compressed says what to do with compressed request messages:
	// "recompress" (default) or "refuse".
	Compressed string `yaml:"compressed,omitempty"`
}

// HTTPRelocationSpec moves the value of Header into JSON body field Field.
type HTTPRelocationSpec struct {
	// PathPrefix, when set, limits the rule to matching paths.
	PathPrefix string `yaml:"path_prefix,omitempty"`
	// Header is the request header; required.
	Header string `yaml:"header"`
	// Field is the top-level JSON field written; default "prompt".
	Field string `yaml:"field,omitempty"`
	// Threshold: values of at least this many bytes are relocated; default
	// 4096.
	Threshold int `yaml:"threshold,omitempty"`
	// Max: larger values are refused; default 16 MiB.
	Max int `yaml:"max,omitempty"`
}

// TelemetrySpec holds the export settings.
type TelemetrySpec struct {
	// ServiceName for OTLP resources; default "llmesh".
	ServiceName string `yaml:"service_name,omitempty"`
	// Prometheus exposes metrics on the admin listener.
	Prometheus PrometheusSpec `yaml:"prometheus,omitempty"`
	// OTLP exports metrics and traces over OTLP/gRPC.
	OTLP OTLPSpec `yaml:"otlp,omitempty"`
	// ServerTiming adds a Server-Timing response trailer/header.
	ServerTiming bool `yaml:"server_timing,omitempty"`
}

// PrometheusSpec holds the Prometheus endpoint settings.
type PrometheusSpec struct {
	// Enabled turns the endpoint on.
	Enabled bool `yaml:"enabled,omitempty"`
	// Path on the admin listener; default "/metrics".
	Path string `yaml:"path,omitempty"`
}

// OTLPSpec holds the OTLP exporter settings.
type OTLPSpec struct {
	// Endpoint host:port; empty disables OTLP.
	Endpoint string `yaml:"endpoint,omitempty"`
	// Insecure uses plaintext gRPC.
	Insecure bool `yaml:"insecure,omitempty"`
	// Interval between metric exports; default "10s".
	Interval string `yaml:"interval,omitempty"`
}

// SchedulerServiceSpec is the shared scheduler service.
type SchedulerServiceSpec struct {
	// Address host:port of the service; required.
	Address string `yaml:"address"`
	// FailureMode when the service is unreachable: "fail_open" (admit
	// without scheduling) or "fail_closed" (reject, ErrUnavailable); default
	// "fail_open".
	FailureMode string `yaml:"failure_mode,omitempty"`
	// Timeout for reaching the service; default "1s".
	Timeout string `yaml:"timeout,omitempty"`
	// Transport of the proxies' sessions: "framed" (the messages over
	// plain TCP, far cheaper for the service per message), "grpc" (a gRPC
	// stream), or "auto" (default: framed, gRPC with a service that does
	// not speak it). The service accepts both on its one address.
	Transport string `yaml:"transport,omitempty"`
	// ReportDelay is how long a proxy may hold a request's progress and
	// release reports to send them with its next message to the service
	// (normally the next request's admission), so a busy proxy sends about
	// one message per request; admissions never wait. The service sees a
	// release up to this late. "0s" sends each report at once; at most
	// maxReportDelay; default "150us".
	ReportDelay string `yaml:"report_delay,omitempty"`
	// TLS, when set, reaches the service over TLS (both transports); with
	// cert_file and key_file, over mTLS. The files are read by each host
	// when it connects.
	TLS *ServiceTLSSpec `yaml:"tls,omitempty"`
	// TokenFile, when set, is a file holding the bearer token the host
	// proves its identity with to a service that has an identities file
	// (scheduler serve --identities): sent on both transports, in the
	// clear unless tls is set. Read by each host when it connects.
	TokenFile string `yaml:"token_file,omitempty"`
}

// ServiceTLSSpec is how a host verifies the scheduler service and proves
// itself to it.
type ServiceTLSSpec struct {
	// CAFile is the PEM bundle that signs the service's certificate; empty:
	// the system's roots.
	CAFile string `yaml:"ca_file,omitempty"`
	// CertFile and KeyFile are the host's client certificate and key, for a
	// service that requires them (scheduler serve --client-ca).
	CertFile string `yaml:"cert_file,omitempty"`
	KeyFile  string `yaml:"key_file,omitempty"`
	// ServerName is the name the service's certificate must carry; empty:
	// the host of address.
	ServerName string `yaml:"server_name,omitempty"`
}

// ExperimentSpec compares scheduler configs on one pool.
type ExperimentSpec struct {
	// Name is unique among experiments.
	Name string `yaml:"name"`
	// Pool is the pool whose scheduler config the arms override; required.
	Pool string `yaml:"pool"`
	// Arms are the variants; at least one.
	Arms []ArmSpec `yaml:"arms"`
	// Active, when set, sends all traffic to that arm, ignoring headers and
	// weights.
	Active string `yaml:"active,omitempty"`
}

// ArmSpec is one variant of an experiment.
type ArmSpec struct {
	// Name is unique within the experiment.
	Name string `yaml:"name"`
	// Weight is the arm's share of traffic not picked by header; arms with
	// weight 0 get traffic only by header or when active. When all weights
	// are 0 the first arm gets that traffic.
	Weight int `yaml:"weight,omitempty"`
	// Headers, when set, send requests carrying all of these exact header
	// values to this arm.
	Headers map[string]string `yaml:"headers,omitempty"`
	// Scheduler overrides the pool's scheduler fields that are set here.
	Scheduler SchedulerSpec `yaml:"scheduler,omitempty"`
}

// AdminSpec is the admin listener.
type AdminSpec struct {
	// Address host:port; empty disables the admin listener.
	Address string `yaml:"address,omitempty"`
}
