// Package workload is the benchmark's workload specification: a YAML file is
// parsed into a Spec, defaulted, validated (errors name the field path and the
// bad value) and compiled into a Workload that produces the request sequence
// deterministically from its seed. The live runner (llmesh bench run) and the
// virtual-time simulator (llmesh bench simulate) both consume a Workload.
package workload

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/llmesh/llmesh/config"
)

// Protocols the harness speaks.
const (
	ProtocolCompletions = "openai-completions"
	ProtocolChat        = "openai-chat"
	ProtocolGRPC        = "grpc-llm-v1"
	ProtocolVLLM        = "grpc-vllm"
)

// Arrival processes.
const (
	ArrivalConstant = "constant"
	ArrivalPoisson  = "poisson"
	ArrivalGamma    = "gamma"
	ArrivalTrace    = "trace"
	ArrivalClosed   = "closed"
)

// Length distribution kinds.
const (
	DistFixed     = "fixed"
	DistUniform   = "uniform"
	DistLognormal = "lognormal"
	DistEmpirical = "empirical"
	// DistTrace takes the length from the trace row being replayed; only
	// valid with arrival process "trace".
	DistTrace = "trace"
)

// MaxFileBytes bounds a workload file.
const MaxFileBytes = 4 << 20

// Spec is a workload as written in YAML.
type Spec struct {
	// Name labels reports; defaults to the file name without extension.
	Name string `yaml:"name"`
	// Profile names the engine profile the workload is meant for (for example
	// llama3-8b-h200); it is carried into reports and used by the simulator.
	Profile string `yaml:"profile"`
	// Model is sent as the request's model. Empty: the model an
	// OpenAI-compatible target lists first at /v1/models, else none (the
	// server uses the one it serves).
	Model string `yaml:"model"`
	// Protocol is one of openai-completions (default), openai-chat,
	// grpc-llm-v1, grpc-vllm.
	Protocol string `yaml:"protocol"`
	// Seed makes the request sequence reproducible; default 1.
	Seed int64 `yaml:"seed"`
	// Duration bounds the measured part of the run by time; Requests by count.
	// At least one is needed; with both, whichever ends first.
	Duration Duration `yaml:"duration"`
	Requests int      `yaml:"requests"`
	// Warmup requests are sent before the measured ones and left out of the
	// statistics: by time, by count, or both.
	Warmup Warmup `yaml:"warmup"`
	// Arrival is the arrival process.
	Arrival Arrival `yaml:"arrival"`
	// Classes are the request classes; their shares are normalized.
	Classes []ClassSpec `yaml:"classes"`
	// Stream asks for streamed responses; default true (TTFT needs it).
	Stream *bool `yaml:"stream"`
	// MaxScheduleLagP99, when set, is an absolute budget for the p99 of
	// (actual − intended send time), replacing the relative one: above it
	// a run is invalid. Zero (the default): the relative budget applies.
	MaxScheduleLagP99 Duration `yaml:"max_schedule_lag_p99"`
	// ScheduleLagFraction is the relative budget: a run is invalid when its
	// schedule-lag p99 exceeds this fraction of the smallest of the mean
	// arrival gap, the classes' TTFT SLOs and their measured TTFT P50s, the
	// figures the lateness could move. Default DefaultScheduleLagFraction.
	ScheduleLagFraction float64 `yaml:"schedule_lag_fraction"`
	// Timeout bounds one request; default 5m.
	Timeout Duration `yaml:"timeout"`
	// Primaries declares each class's primary metric of a paired A/B
	// judgement, as CLASS=METRIC (primary.go); a --primary flag overrides
	// the whole list.
	Primaries Primaries `yaml:"primary"`
}

// Warmup is the part of a run excluded from statistics.
type Warmup struct {
	Duration Duration `yaml:"duration"`
	Requests int      `yaml:"requests"`
}

// Arrival describes when requests are sent.
type Arrival struct {
	// Process is constant, poisson (default), gamma, trace or closed.
	Process string `yaml:"process"`
	// Rate is requests per second for constant, poisson and gamma.
	Rate float64 `yaml:"rate"`
	// Burstiness is the gamma shape factor as in vLLM's bench serve: 1 is
	// Poisson, below 1 burstier, above 1 more regular. Default 1.
	Burstiness float64 `yaml:"burstiness"`
	// Concurrency is the number of clients of a closed loop: each sends its
	// next request when the previous one ends.
	Concurrency int `yaml:"concurrency"`
	// Trace is the Azure-format CSV replayed by process trace; relative paths
	// are resolved against the workload file's directory.
	Trace string `yaml:"trace"`
	// TimeScale multiplies the trace's inter-arrival times: 0.5 replays twice
	// as fast, 2 half as fast. Default 1.
	TimeScale float64 `yaml:"time_scale"`
}

// ClassSpec is one request class as written in YAML.
type ClassSpec struct {
	Name string `yaml:"name"`
	// Priority follows vLLM: a lower value is served first. It is sent as the
	// request's priority field (OpenAI JSON, llm.v1) unless SendPriority is
	// false.
	Priority     int   `yaml:"priority"`
	SendPriority *bool `yaml:"send_priority"`
	// Share is the class's relative share of requests.
	Share float64 `yaml:"share"`
	// SLO is the class's latency objective; a zero field is not checked.
	SLO SLO `yaml:"slo"`
	// AttainmentTarget is the share of requests that must meet the SLO for
	// --slo-gate to pass; default 0.9.
	AttainmentTarget float64 `yaml:"attainment_target"`
	// Prompt and Output are the prompt and output length distributions in
	// tokens.
	Prompt Dist `yaml:"prompt_tokens"`
	Output Dist `yaml:"output_tokens"`
	// Headers are sent with every request of the class (HTTP headers or gRPC
	// metadata), for example a tenant or priority header.
	Headers map[string]string `yaml:"headers"`
	// SystemPromptTokens, when set, starts every prompt of the class with
	// the same system prompt of this many tokens (one per class: a tenant
	// with its own system prompt is a class with its own headers), which a
	// prefix cache serves after its first request. prompt_tokens is then
	// the length of what follows it.
	SystemPromptTokens int `yaml:"system_prompt_tokens"`
	// Session, when set, makes every arrival of the class a multi-turn
	// conversation: prompt_tokens is each new user message's length,
	// output_tokens each reply's.
	Session *Session `yaml:"session"`
}

// Session describes a class's multi-turn conversations. Turn k's prompt is
// the system prompt (if any), then every earlier turn's user message and
// reply, then the new user message, so each turn resends the history that
// an engine's prefix cache may still hold. Sessions are open-loop, as a
// trace replay is: turn k+1 is sent think_time_ms after turn k was sent,
// whether or not turn k's answer has ended (the think time includes it).
type Session struct {
	// Turns is the number of turns of a session (at least 1).
	Turns Dist `yaml:"turns"`
	// ThinkTimeMS is the gap between two turns' send times, in milliseconds.
	ThinkTimeMS Dist `yaml:"think_time_ms"`
	// MaxContextTokens, when set, ends a session before a turn whose prompt
	// plus reply would exceed it (an engine refuses a prompt longer than
	// its context; set it to the engine's max model length).
	MaxContextTokens int `yaml:"max_context_tokens"`
}

// SLO is a per-request latency objective.
type SLO struct {
	TTFT Duration `yaml:"ttft"`
	TPOT Duration `yaml:"tpot"`
}

// Dist is a token length distribution.
type Dist struct {
	// Kind is fixed, uniform, lognormal, empirical or trace.
	Kind string `yaml:"kind"`
	// Value is the fixed length.
	Value int `yaml:"value"`
	// Min and Max bound uniform (inclusive) and clamp lognormal and
	// empirical samples when set.
	Min int `yaml:"min"`
	Max int `yaml:"max"`
	// Median and Sigma parameterize lognormal: exp(N(ln median, sigma²)).
	Median float64 `yaml:"median"`
	Sigma  float64 `yaml:"sigma"`
	// Trace and Column select the sample set of empirical: the Azure CSV and
	// its column, context (prompt) or generated (output).
	Trace  string `yaml:"trace"`
	Column string `yaml:"column"`
}

// Duration is a time.Duration written as a Go duration string ("250ms").
type Duration time.Duration

// D returns the time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// UnmarshalYAML accepts Go duration strings.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: want a duration like \"250ms\"", n.Line)
	}
	v, err := time.ParseDuration(strings.TrimSpace(n.Value))
	if err != nil {
		if n.Value == "0" {
			*d = 0
			return nil
		}
		return fmt.Errorf("line %d: %q is not a duration like \"250ms\"", n.Line, n.Value)
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes the Go duration string.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// Parse decodes a workload from YAML, rejecting unknown fields. It does no
// defaulting or validation; see Spec.Default and Spec.Validate, or Load.
func Parse(data []byte) (*Spec, error) {
	if len(data) > MaxFileBytes {
		return nil, fmt.Errorf("workload: %d bytes exceeds the limit of %d", len(data), MaxFileBytes)
	}
	var s Spec
	found, err := config.DecodeStrict(data, &s)
	if err != nil {
		return nil, fmt.Errorf("workload: %w", err)
	}
	if !found {
		return nil, errors.New("workload: empty document")
	}
	return &s, nil
}

// LoadFile reads, parses, defaults, validates and compiles a workload file.
// Relative trace paths resolve against the file's directory.
func LoadFile(path string) (*Workload, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("workload: %w", err)
	}
	s, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if s.Name == "" {
		base := path[strings.LastIndexAny(path, `/\`)+1:]
		s.Name = strings.TrimSuffix(strings.TrimSuffix(base, ".yaml"), ".yml")
	}
	dir := "."
	if i := strings.LastIndexAny(path, `/\`); i >= 0 {
		dir = path[:i]
	}
	w, err := s.build(dir)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return w, nil
}

// Load parses, defaults, validates and compiles a workload from YAML;
// relative trace paths resolve against dir.
func Load(data []byte, dir string) (*Workload, error) {
	s, err := Parse(data)
	if err != nil {
		return nil, err
	}
	return s.build(dir)
}

// build defaults, validates and compiles s.
func (s *Spec) build(dir string) (*Workload, error) {
	s.Default()
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return Compile(s, CompileOptions{BaseDir: dir})
}

// Default fills unset fields with their defaults.
func (s *Spec) Default() {
	if s.Name == "" {
		s.Name = "workload"
	}
	if s.Protocol == "" {
		s.Protocol = ProtocolCompletions
	}
	if s.Seed == 0 {
		s.Seed = 1
	}
	if s.Stream == nil {
		t := true
		s.Stream = &t
	}
	if s.ScheduleLagFraction == 0 {
		s.ScheduleLagFraction = DefaultScheduleLagFraction
	}
	if s.Timeout == 0 {
		s.Timeout = Duration(5 * time.Minute)
	}
	if s.Arrival.Process == "" {
		s.Arrival.Process = ArrivalPoisson
	}
	if s.Arrival.Burstiness == 0 {
		s.Arrival.Burstiness = 1
	}
	if s.Arrival.TimeScale == 0 {
		s.Arrival.TimeScale = 1
	}
	if len(s.Classes) == 1 && s.Classes[0].Share == 0 {
		s.Classes[0].Share = 1
	}
	for i := range s.Classes {
		c := &s.Classes[i]
		if c.AttainmentTarget == 0 {
			c.AttainmentTarget = 0.9
		}
		if c.SendPriority == nil {
			t := true
			c.SendPriority = &t
		}
		for _, d := range []*Dist{&c.Prompt, &c.Output} {
			if d.Kind == "" && d.Value > 0 {
				d.Kind = DistFixed
			}
			if d.Kind == "" && s.Arrival.Process == ArrivalTrace {
				d.Kind = DistTrace
			}
		}
		if c.Prompt.Kind == DistEmpirical && c.Prompt.Column == "" {
			c.Prompt.Column = "context"
		}
		if c.Output.Kind == DistEmpirical && c.Output.Column == "" {
			c.Output.Column = "generated"
		}
		if ss := c.Session; ss != nil {
			for _, d := range []*Dist{&ss.Turns, &ss.ThinkTimeMS} {
				if d.Kind == "" && d.Value > 0 {
					d.Kind = DistFixed
				}
			}
			if ss.ThinkTimeMS == (Dist{}) {
				ss.ThinkTimeMS.Kind = DistFixed
			}
		}
	}
}

// DefaultScheduleLagFraction is ScheduleLagFraction's default: the
// harness may be late by a tenth of the smallest figure its lateness could
// move before a run stops counting.
const DefaultScheduleLagFraction = 0.1
