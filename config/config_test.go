package config_test

import (
	"errors"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/llmesh/llmesh/config"
)

const minimal = `
listeners:
  - name: main
    address: 127.0.0.1:8080
    routes: [{pool: sim}]
pools:
  - name: sim
    protocol: openai
    endpoints: [127.0.0.1:8000]
`

// errorLines loads src and returns the error's lines.
func errorLines(t *testing.T, src string) []string {
	t.Helper()
	_, err := config.Load([]byte(src))
	if err == nil {
		t.Fatal("Load succeeded, want errors")
	}
	var es config.Errors
	if !errors.As(err, &es) {
		t.Fatalf("error is %T, want config.Errors: %v", err, err)
	}
	return strings.Split(err.Error(), "\n")
}

func TestMinimalDefaults(t *testing.T) {
	cfg, err := config.Load([]byte(minimal))
	if err != nil {
		t.Fatal(err)
	}
	p := cfg.Pool("sim")
	want := config.SchedulerConfig{Policy: "fifo", Preemption: config.PreemptionConfig{MinLowerInflight: 1, MaxPerRequest: 3, Target: 1,
		AbortProbe: 5 * time.Minute}}
	if diff := cmp.Diff(want, p.Scheduler); diff != "" {
		t.Errorf("scheduler (-want +got):\n%s", diff)
	}
	if p.MaxInflight != config.DefaultMaxInflight || p.ConnectTimeout != 5*time.Second {
		t.Errorf("pool defaults: %+v", p)
	}
	if cfg.DefaultClass == nil || cfg.DefaultClass.Name != "default" || cfg.DefaultClass.MaxQueue != 1024 {
		t.Errorf("default class = %+v", cfg.DefaultClass)
	}
	r := cfg.Listener("main").Routes[0]
	if r.Name != "route-0" || r.ID != "main/route-0" || r.PathPrefix != "/" || r.Pool != p {
		t.Errorf("route = %+v", r)
	}
	if rl := cfg.Relocation; rl.MaxMessage != 32<<20 || rl.MaxBody != 32<<20 {
		t.Errorf("relocation limits max_message %d max_body %d, want 32 MiB each", rl.MaxMessage, rl.MaxBody)
	}
	if cfg.ClassOrDefault("nope") != cfg.DefaultClass {
		t.Error("unknown class does not fall back to the default")
	}
}

func TestErrors(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want []string
	}{
		{
			name: "unknown fields with paths, all reported",
			src: minimal + `
classes:
  - name: a
    priorty: 1
    slo: {ttft: 1s, tpott: 2s}
telemetry: {promethus: {enabled: true}}
`,
			want: []string{
				`classes[0].priorty: unknown field (did you mean "priority"?) (line 13)`,
				`classes[0].slo.tpott: unknown field (did you mean "tpot"?) (line 14)`,
				`telemetry.promethus: unknown field (did you mean "prometheus"?) (line 15)`,
			},
		},
		{
			name: "wrong types",
			src: `
pools:
  - name: p
    protocol: [grpc]
    endpoints: 127.0.0.1:1
    capacity: {max_inflight: lots}
classes:
  - {name: a, priority: high, preemptible: maybe, attainment_target: x}
`,
			want: []string{
				`pools[0].protocol: must be a string, got a list (line 4)`,
				`pools[0].endpoints: must be a list, got "127.0.0.1:1" (line 5)`,
				`pools[0].capacity.max_inflight: must be an integer, got "lots" (line 6)`,
				`classes[0].priority: must be an integer, got "high" (line 8)`,
				`classes[0].preemptible: must be true or false, got "maybe" (line 8)`,
				`classes[0].attainment_target: must be a number, got "x" (line 8)`,
			},
		},
		{
			name: "duplicate keys",
			src:  "default_class: a\ndefault_class: b\nclassification: {tenants: {x: a, x: b}}\n",
			want: []string{
				`default_class: duplicate field (line 2)`,
				`classification.tenants["x"]: duplicate key (line 3)`,
			},
		},
		{
			name: "semantic errors, all at once",
			src: `
listeners:
  - name: Main
    address: localhost
    routes:
      - {pool: nope, class: gold, match: {path_prefix: v1}}
pools:
  - name: sim
    protocol: http
    endpoints: [":0", "h:99999"]
    connect_timeout: soon
    capacity: {max_inflight: -1, metrics: {url: "ftp://x", interval: 0s}}
    scheduler: {policy: lottery, aging: -1s}
  - name: sim
    protocol: grpc
    endpoints: [h:1]
classes:
  - {name: a, priority: 0, slo: {ttft: "-5ms", tpot: 0s}, attainment_target: 1.5}
  - {name: b, priority: 1, queue: {max_wait: 25h}}
default_class: c
relocation:
  grpc: [{metadata: X-Prompt, field: 19500, type: text, threshold: 100, max: 10, compressed: maybe}]
  http: [{field: a.b}]
experiments:
  - {name: ab, pool: sim, arms: [{name: x, weight: -1}, {name: x}], active: y}
scheduler_service: {failure_mode: maybe, transport: quic}
classification:
  priority_header: {trusted_sources: [10.0.0.0/33]}
`,
			want: []string{
				`classes[0].slo.ttft: "-5ms" must be positive`,
				`classes[0].slo.tpot: "0s" must be positive (omit it for no objective)`,
				`classes[0].attainment_target: 1.5 must be in (0, 1]`,
				`classes[1].queue.max_wait: "25h" is over the limit of 24h0m0s`,
				`default_class: "c" is not a defined class`,
				`pools[0].connect_timeout: "soon" is not a duration (use Go syntax such as "250ms" or "1m30s")`,
				`pools[0].scheduler.policy: "lottery" is not a known policy (known: fifo, priority, preemptive, edf)`,
				`pools[0].scheduler.aging: "-1s" must be positive`,
				`pools[0].protocol: "http" must be "openai" or "grpc"`,
				`pools[0].endpoints[0]: ":0" has an invalid port`,
				`pools[0].endpoints[1]: "h:99999" has an invalid port`,
				`pools[0].capacity.max_inflight: -1 must be between 1 and 16777216`,
				`pools[0].capacity.metrics.url: "ftp://x" must be an http(s) URL`,
				`pools[0].capacity.metrics.interval: "0s" must be positive`,
				`pools[1].name: duplicate pool "sim"`,
				`experiments[0].arms[0].weight: -1 must be between 0 and 1000000`,
				`experiments[0].arms[1].name: duplicate arm "x"`,
				`experiments[0].active: "y" is not an arm of this experiment`,
				`listeners[0].name: "Main" must be lower-case letters, digits, '.', '_' or '-', starting and ending with a letter or digit`,
				`listeners[0].address: "localhost" must be host:port`,
				`listeners[0].routes[0].match.path_prefix: "v1" must start with "/"`,
				`listeners[0].routes[0].pool: "nope" is not a defined pool`,
				`listeners[0].routes[0].class: "gold" is not a defined class`,
				`classification.priority_header.name: is required when trusted_sources or trusted_marker is set`,
				`classification.priority_header.trusted_sources[0]: "10.0.0.0/33" is not a CIDR prefix or IP address`,
				`relocation.grpc[0].metadata: "X-Prompt" must be lower-case (gRPC metadata keys are)`,
				`relocation.grpc[0].field: 19500 is in protobuf's reserved range 19000-19999`,
				`relocation.grpc[0].type: "text" must be "string" or "bytes"`,
				`relocation.grpc[0].compressed: "maybe" must be "recompress" or "refuse"`,
				`relocation.grpc[0].max: 10 must be at least threshold 100`,
				`relocation.http[0].header: is required`,
				`relocation.http[0].field: "a.b" must be a plain top-level JSON field name`,
				`scheduler_service.address: is required`,
				`scheduler_service.failure_mode: "maybe" must be "fail_open" or "fail_closed"`,
				`scheduler_service.transport: "quic" must be "auto", "grpc" or "framed"`,
			},
		},
		{
			name: "scheduler_service.report_delay out of range",
			src: `
pools:
  - {name: r, protocol: grpc, endpoints: [h:1]}
scheduler_service: {address: "127.0.0.1:7070", report_delay: 1s}
`,
			want: []string{
				`scheduler_service.report_delay: "1s" is over the limit of 10ms (a release may arrive that late)`,
			},
		},
		{
			name: "scheduler_service.report_delay negative",
			src: `
pools:
  - {name: r, protocol: grpc, endpoints: [h:1]}
scheduler_service: {address: "127.0.0.1:7070", report_delay: -1us}
`,
			want: []string{
				`scheduler_service.report_delay: "-1us" must be positive`,
			},
		},
		{
			name: "preemption target of the wrong type",
			src: `
pools:
  - {name: r, protocol: grpc, endpoints: [h:1], scheduler: {preemption: {target: high}}}
`,
			want: []string{
				`pools[0].scheduler.preemption.target: must be a number, got "high" (line 3)`,
			},
		},
		{
			name: "preemption target out of range, at the pool and in an arm",
			src: `
pools:
  - {name: p, protocol: grpc, endpoints: [h:1], scheduler: {preemption: {target: 0}}}
  - {name: q, protocol: grpc, endpoints: [h:1], scheduler: {preemption: {target: .nan}}}
experiments:
  - {name: e, pool: q, arms: [{name: a, scheduler: {preemption: {target: 1.5}}}, {name: b, scheduler: {preemption: {target: 0.25}}}]}
`,
			want: []string{
				`pools[0].scheduler.preemption.target: 0 must be in (0, 1]`,
				`pools[1].scheduler.preemption.target: NaN must be in (0, 1]`,
				`experiments[0].arms[0].scheduler.preemption.target: 1.5 must be in (0, 1]`,
			},
		},
		{
			name: "static bounds not a boolean",
			src: `
pools:
  - {name: p, protocol: grpc, endpoints: [h:1], scheduler: {static_bounds: sometimes}}
`,
			want: []string{
				`pools[0].scheduler.static_bounds: must be true or false, got "sometimes" (line 3)`,
			},
		},
		{
			name: "overload release factor out of range, at the pool and in an arm",
			src: `
pools:
  - {name: p, protocol: grpc, endpoints: [h:1], scheduler: {overload_release: 0.5}}
  - {name: q, protocol: grpc, endpoints: [h:1], scheduler: {overload_release: 0}}
experiments:
  - {name: e, pool: q, arms: [{name: a, scheduler: {overload_release: -3}}, {name: b, scheduler: {overload_release: 20}}]}
`,
			want: []string{
				`pools[0].scheduler.overload_release: 0.5 must be 0 (never) or in [1, 1e6]`,
				`experiments[0].arms[0].scheduler.overload_release: -3 must be 0 (never) or in [1, 1e6]`,
			},
		},
		{
			name: "abort probe not a duration or negative, at the pool and in an arm",
			src: `
pools:
  - {name: p, protocol: grpc, endpoints: [h:1], scheduler: {preemption: {abort_probe: soon}}}
  - {name: q, protocol: grpc, endpoints: [h:1], scheduler: {preemption: {abort_probe: 10m}}}
experiments:
  - {name: e, pool: q, arms: [{name: a, scheduler: {preemption: {abort_probe: -1s}}}, {name: b, scheduler: {preemption: {abort_probe: 0s}}}]}
`,
			want: []string{
				`pools[0].scheduler.preemption.abort_probe: "soon" is not a duration (use Go syntax such as "250ms" or "1m30s")`,
				`experiments[0].arms[0].scheduler.preemption.abort_probe: "-1s" must be positive`,
			},
		},
		{
			name: "admission bounds out of range, at the pool and in an arm",
			src: `
pools:
  - {name: p, protocol: grpc, endpoints: [h:1], scheduler: {max_prefill_tokens: -1, reserve_urgent: -2}}
  - {name: q, protocol: grpc, endpoints: [h:1], scheduler: {max_prefill_tokens: 4096, reserve_urgent: 8}}
experiments:
  - {name: e, pool: q, arms: [{name: a, scheduler: {reserve_urgent: -1}}, {name: b, scheduler: {max_prefill_tokens: 0}}]}
`,
			want: []string{
				`pools[0].scheduler.max_prefill_tokens: -1 must be between 0 and 1099511627776`,
				`pools[0].scheduler.reserve_urgent: -2 must be between 0 and 16777216`,
				`experiments[0].arms[0].scheduler.reserve_urgent: -1 must be between 0 and 16777216`,
			},
		},
		{
			name: "relocation limits",
			src: `
relocation:
  grpc: [{metadata: a, field: 3, threshold: 10, max: 1000}, {metadata: b, field: 3, threshold: 10, max: 3000}, {metadata: c, field: 3, threshold: 10, max: 3000}]
  http: [{header: x, threshold: 10, max: 2048}]
  max_message: 2000
  max_body: -1
`,
			want: []string{
				`relocation.max_body: -1 must be between 1 and 1073741824`,
				`relocation.max_message: 2000 is less than relocation.grpc[1].max 3000: such a value could never fit (raise max_message or lower the rule's max)`,
			},
		},
		{
			name: "relocation body limit below an http rule's max",
			src:  "relocation: {http: [{header: x}], max_body: 4096}",
			want: []string{
				`relocation.max_body: 4096 is less than relocation.http[0].max 16777216: such a value could never fit (raise max_body or lower the rule's max)`,
			},
		},
		{
			// Absent means the default; 0 used to become the default
			// silently while -1 was refused.
			name: "max_inflight 0 refused, not read as absent",
			src: `
pools:
  - {name: p, protocol: openai, endpoints: ["127.0.0.1:1"], capacity: {max_inflight: 0}}
  - {name: q, protocol: openai, endpoints: ["127.0.0.1:2"], capacity: {max_inflight_tokens: 100}}
`,
			want: []string{
				`pools[0].capacity.max_inflight: 0 would admit nothing: must be between 1 and 16777216 (leave it out for the default, 64)`,
			},
		},
		{
			name: "not a mapping",
			src:  "- a\n- b\n",
			want: []string{`must be a mapping, got a list (line 1)`},
		},
		{
			name: "bad yaml",
			src:  "a: [\n",
			want: []string{`invalid YAML: line 1: did not find expected node content`},
		},
		{
			name: "two documents",
			src:  "admin: {address: ':1'}\n---\nadmin: {}\n",
			want: []string{`more than one YAML document (line 2)`},
		},
		{
			name: "references between sections",
			src: minimal + `
classes: [{name: a}, {name: b}]
experiments:
  - {name: e1, pool: sim, arms: [{name: x}]}
  - {name: e2, pool: sim, arms: [{name: y}]}
  - {name: e3, pool: gone, arms: []}
`,
			want: []string{
				`default_class: is required when more than one class is defined`,
				`experiments[1].pool: pool "sim" already has experiment "e1"`,
				`experiments[2].pool: "gone" is not a defined pool`,
				`experiments[2].arms: at least one arm is required`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := errorLines(t, tt.src)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAliasBombRefused(t *testing.T) {
	// 1000 references to a listener holding 1000 references to a route:
	// a 10 KB file that expands to a million routes.
	refs := func(name string) string { return "[" + strings.Repeat("*"+name+", ", 999) + "*" + name + "]" }
	bomb := "pools: [{name: p, protocol: grpc, endpoints: ['h:1']}]\n" +
		"listeners:\n  - &y {name: y, address: ':0', routes: [&rt {pool: p}, " + strings.TrimPrefix(refs("rt"), "[") + "}\n" +
		"  - " + strings.Repeat("*y\n  - ", 999) + "*y\n"
	_, err := config.Load([]byte(bomb))
	if err == nil || !strings.Contains(err.Error(), "document too large or too many aliases") {
		t.Fatalf("alias bomb: err = %.300v", err)
	}
}

func TestOversizedRefused(t *testing.T) {
	_, err := config.Load(make([]byte, config.MaxFileSize+1))
	if err == nil || !strings.Contains(err.Error(), "over the limit") {
		t.Fatalf("err = %v", err)
	}
}

func TestEmptyFileNeedsNothing(t *testing.T) {
	cfg, err := config.Load(nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.DefaultClass.Name != "default" || len(cfg.Listeners) != 0 {
		t.Errorf("cfg = %+v", cfg)
	}
}

func TestExperimentPick(t *testing.T) {
	cfg, err := config.Load([]byte(minimal + `
experiments:
  - name: ab
    pool: sim
    arms:
      - {name: a, weight: 1, headers: {X-Arm: a}}
      - {name: b, weight: 3}
      - {name: c, headers: {x-arm: c}}
`))
	if err != nil {
		t.Fatal(err)
	}
	e := cfg.Experiment("ab")
	none := func(string) string { return "" }
	for _, tt := range []struct {
		u    float64
		hdr  string
		want string
	}{
		{0, "", "a"}, {0.24, "", "a"}, {0.25, "", "b"}, {0.999, "", "b"},
		{0.9, "a", "a"}, {0.1, "c", "c"}, {-1, "", "a"}, {1, "", "b"}, {2, "", "b"},
	} {
		h := none
		if tt.hdr != "" {
			h = func(k string) string {
				if k == "x-arm" {
					return tt.hdr
				}
				return ""
			}
		}
		if got := e.Pick(h, tt.u).Name; got != tt.want {
			t.Errorf("Pick(x-arm=%q, %v) = %s, want %s", tt.hdr, tt.u, got, tt.want)
		}
	}
	on, err := cfg.WithActiveArm("ab", "c")
	if err != nil {
		t.Fatal(err)
	}
	if got := on.Experiment("ab").Pick(none, 0.5).Name; got != "c" {
		t.Errorf("active arm: Pick = %s, want c", got)
	}
	if cfg.Experiment("ab").Active != nil || cfg.Source.Experiments[0].Active != "" {
		t.Error("WithActiveArm modified the original config")
	}
	off, err := on.WithActiveArm("ab", "")
	if err != nil || off.Experiment("ab").Active != nil {
		t.Errorf("clearing the active arm: %v", err)
	}
	if _, err := cfg.WithActiveArm("ab", "zz"); err == nil {
		t.Error("unknown arm accepted")
	}
	if _, err := cfg.WithActiveArm("zz", "a"); err == nil {
		t.Error("unknown experiment accepted")
	}
	// Several switches: the valid one applies, the stale ones lapse with
	// their reasons.
	many, lapsed := cfg.WithActiveArms(map[string]string{"ab": "c", "zz": "a"})
	if many.Experiment("ab").Active == nil || many.Experiment("ab").Active.Name != "c" || len(lapsed) != 1 || lapsed["zz"] == nil {
		t.Errorf("WithActiveArms: active %v, lapsed %v", many.Experiment("ab").Active, lapsed)
	}
	if same, lapsed := cfg.WithActiveArms(nil); same != cfg || lapsed != nil {
		t.Errorf("WithActiveArms(nil) = %p, %v; want the config itself", same, lapsed)
	}
}

func TestArmOverlaysPoolScheduler(t *testing.T) {
	cfg, err := config.Load([]byte(`
pools:
  - name: p
    protocol: grpc
    endpoints: [h:1]
    scheduler: {policy: preemptive, aging: 2s, max_prefill_tokens: 2048, preemption: {min_run_time: 1s, max_per_request: 5, target: 0.8, abort_probe: 1m}}
experiments:
  - name: e
    pool: p
    arms:
      - {name: fifo, scheduler: {policy: fifo}}
      - {name: strict, scheduler: {reserve_urgent: 4, static_bounds: true, preemption: {max_per_request: 0, target: 0.5, abort_probe: 0s}}}
`))
	if err != nil {
		t.Fatal(err)
	}
	e := cfg.Experiment("e")
	want := config.SchedulerConfig{Policy: "fifo", Aging: 2 * time.Second, MaxPrefillTokens: 2048,
		Preemption: config.PreemptionConfig{MinLowerInflight: 1, MinRunTime: time.Second, MaxPerRequest: 5, Target: 0.8, AbortProbe: time.Minute}}
	if diff := cmp.Diff(want, e.Arm("fifo").Scheduler); diff != "" {
		t.Errorf("fifo arm (-want +got):\n%s", diff)
	}
	want.Policy = "preemptive"
	want.Preemption.MaxPerRequest = 0
	want.Preemption.Target = 0.5
	want.Preemption.AbortProbe = 0
	want.ReserveUrgent = 4
	want.StaticBounds = true
	if diff := cmp.Diff(want, e.Arm("strict").Scheduler); diff != "" {
		t.Errorf("strict arm (-want +got):\n%s", diff)
	}
}

func TestTrustedSources(t *testing.T) {
	cfg, err := config.Load([]byte(`
classification:
  priority_header: {name: X-Class, trusted_sources: [10.1.0.0/16, 127.0.0.1, "::1"]}
`))
	if err != nil {
		t.Fatal(err)
	}
	c := cfg.Classification
	if c.PriorityHeader != "x-class" {
		t.Errorf("header = %q", c.PriorityHeader)
	}
	for addr, want := range map[string]bool{
		"10.1.2.3": true, "10.2.0.1": false, "127.0.0.1": true, "::ffff:127.0.0.1": true, "::1": true, "192.168.0.1": false,
	} {
		if got := c.Trusted(netip.MustParseAddr(addr)); got != want {
			t.Errorf("Trusted(%s) = %v, want %v", addr, got, want)
		}
	}
}

func TestTrustedMarker(t *testing.T) {
	cfg, err := config.Load([]byte(`
classification:
  priority_header:
    name: x-class
    trusted_marker: {header: X-Edge-Verified, value: "k3Y-7f0c2a"}
`))
	if err != nil {
		t.Fatal(err)
	}
	c := cfg.Classification
	if c.TrustedMarkerHeader != "x-edge-verified" || c.TrustedMarkerValue != "k3Y-7f0c2a" {
		t.Errorf("marker = %q: %q", c.TrustedMarkerHeader, c.TrustedMarkerValue)
	}
	for v, want := range map[string]bool{"k3Y-7f0c2a": true, "": false, "k3Y-7f0c2": false, "k3Y-7f0c2a ": false, "K3Y-7F0C2A": false} {
		if got := c.Marked(v); got != want {
			t.Errorf("Marked(%q) = %v, want %v", v, got, want)
		}
	}
	none, err := config.Load([]byte(minimal))
	if err != nil {
		t.Fatal(err)
	}
	if none.Classification.Marked("") || none.Classification.Marked("x") {
		t.Error("a config without a marker trusts a marker")
	}

	const secret = "s3cr3t-never-printed"
	lines := errorLines(t, `
classification:
  priority_header:
    trusted_marker: {header: "bad header", value: " `+secret+`"}
`)
	want := []string{
		`classification.priority_header.name: is required when trusted_sources or trusted_marker is set`,
		`classification.priority_header.trusted_marker.header: "bad header" is not a valid header name`,
		`classification.priority_header.trusted_marker.value: must not start or end with white space (HTTP strips it, so the marker would never match)`,
	}
	if diff := cmp.Diff(want, lines); diff != "" {
		t.Errorf("errors (-want +got):\n%s", diff)
	}
	if strings.Contains(strings.Join(lines, "\n"), secret) {
		t.Errorf("errors print the marker value: %q", lines)
	}
	lines = errorLines(t, `
classification:
  priority_header:
    name: X-Class
    trusted_marker: {header: x-class, value: "a\x01`+secret+`"}
`)
	want = []string{
		`classification.priority_header.trusted_marker.header: "x-class" must differ from the priority header it vouches for`,
		`classification.priority_header.trusted_marker.value: must not contain control characters (they are invalid in header values)`,
	}
	if diff := cmp.Diff(want, lines); diff != "" {
		t.Errorf("errors (-want +got):\n%s", diff)
	}
	if strings.Contains(strings.Join(lines, "\n"), secret) {
		t.Errorf("errors print the marker value: %q", lines)
	}
	lines = errorLines(t, "classification: {priority_header: {name: x-class, trusted_marker: {}}}")
	want = []string{
		`classification.priority_header.trusted_marker.header: is required`,
		`classification.priority_header.trusted_marker.value: is required (an empty marker would trust everyone)`,
	}
	if diff := cmp.Diff(want, lines); diff != "" {
		t.Errorf("errors (-want +got):\n%s", diff)
	}
}

func TestErrorCountBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString("classes:\n")
	for i := 0; i < 500; i++ {
		b.WriteString("  - {name: c, bogus: 1}\n")
	}
	_, err := config.Load([]byte(b.String()))
	var es config.Errors
	if !errors.As(err, &es) {
		t.Fatalf("err = %v", err)
	}
	if len(es) != config.MaxErrors+1 || !strings.Contains(es[len(es)-1].Msg, "and more problems") {
		t.Errorf("%d errors, last %v", len(es), es[len(es)-1])
	}
}

// BenchmarkLoad measures parse → defaults → validate → compile of the
// example mesh, the work done per file change.
func BenchmarkLoad(b *testing.B) {
	data, err := os.ReadFile("../examples/mesh.yaml")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := config.Load(data); err != nil {
			b.Fatal(err)
		}
	}
}

// scheduler_service.report_delay defaults to 150 µs; "0s" turns it off.
func TestServiceReportDelay(t *testing.T) {
	for src, want := range map[string]time.Duration{
		`{address: "127.0.0.1:7070"}`:                      150 * time.Microsecond,
		`{address: "127.0.0.1:7070", report_delay: 0s}`:    0,
		`{address: "127.0.0.1:7070", report_delay: 500us}`: 500 * time.Microsecond,
	} {
		cfg, err := config.Load([]byte("pools:\n  - {name: r, protocol: grpc, endpoints: [h:1]}\nscheduler_service: " + src + "\n"))
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		if got := cfg.SchedulerService.ReportDelay; got != want {
			t.Errorf("%s: report delay %v, want %v", src, got, want)
		}
	}
}
