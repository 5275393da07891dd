package workload

import (
	"errors"
	"fmt"
	"math"
	"net/textproto"
	"strings"
	"time"
)

// Limits on a workload, so a typo cannot make a run allocate or wait without
// bound.
const (
	MaxClasses     = 64
	MaxRequests    = 10_000_000
	MaxRate        = 1_000_000
	MaxConcurrency = 100_000
	MaxLength      = 10_000_000
	MaxRunDuration = 7 * 24 * time.Hour
)

// Validate reports every problem at once, each naming its field path and bad
// value. Call Default first.
func (s *Spec) Validate() error {
	var errs []error
	bad := func(path string, v any, why string) {
		errs = append(errs, fmt.Errorf("%s: %s %s", path, quote(v), why))
	}
	switch s.Protocol {
	case ProtocolCompletions, ProtocolChat, ProtocolGRPC, ProtocolVLLM:
	default:
		bad("protocol", s.Protocol, "must be one of openai-completions, openai-chat, grpc-llm-v1, grpc-vllm")
	}
	if s.Duration < 0 || s.Duration.D() > MaxRunDuration {
		bad("duration", s.Duration.D(), fmt.Sprintf("must be in [0, %v]", MaxRunDuration))
	}
	if s.Requests < 0 || s.Requests > MaxRequests {
		bad("requests", s.Requests, fmt.Sprintf("must be in [0, %d]", MaxRequests))
	}
	if s.Duration == 0 && s.Requests == 0 && s.Arrival.Process != ArrivalTrace {
		errs = append(errs, errors.New("duration, requests: one of them must be set"))
	}
	if s.Warmup.Duration < 0 || s.Warmup.Duration.D() > MaxRunDuration {
		bad("warmup.duration", s.Warmup.Duration.D(), "must be non-negative")
	}
	if s.Warmup.Requests < 0 || s.Warmup.Requests > MaxRequests {
		bad("warmup.requests", s.Warmup.Requests, fmt.Sprintf("must be in [0, %d]", MaxRequests))
	}
	if s.MaxScheduleLagP99 < 0 {
		bad("max_schedule_lag_p99", s.MaxScheduleLagP99.D(), "must not be negative (0: no absolute cap)")
	}
	if !(s.ScheduleLagFraction > 0 && s.ScheduleLagFraction <= 1) {
		bad("schedule_lag_fraction", s.ScheduleLagFraction, "must be in (0, 1]")
	}
	if s.Timeout <= 0 {
		bad("timeout", s.Timeout.D(), "must be positive")
	}

	a := s.Arrival
	switch a.Process {
	case ArrivalConstant, ArrivalPoisson, ArrivalGamma:
		if !(a.Rate > 0) || a.Rate > MaxRate {
			bad("arrival.rate", a.Rate, fmt.Sprintf("must be in (0, %d] requests/s", MaxRate))
		}
	case ArrivalTrace:
		if a.Trace == "" {
			errs = append(errs, errors.New("arrival.trace: must name an Azure-format CSV for process trace"))
		}
	case ArrivalClosed:
		if a.Concurrency <= 0 || a.Concurrency > MaxConcurrency {
			bad("arrival.concurrency", a.Concurrency, fmt.Sprintf("must be in [1, %d] for process closed", MaxConcurrency))
		}
	default:
		bad("arrival.process", a.Process, "must be one of constant, poisson, gamma, trace, closed")
	}
	if !(a.Burstiness > 0) || a.Burstiness > 1000 {
		bad("arrival.burstiness", a.Burstiness, "must be in (0, 1000]")
	}
	if !(a.TimeScale > 0) || a.TimeScale > 1e6 {
		bad("arrival.time_scale", a.TimeScale, "must be in (0, 1e6]")
	}
	if a.Process != ArrivalClosed && a.Concurrency != 0 {
		bad("arrival.concurrency", a.Concurrency, "is only used by process closed")
	}

	if len(s.Classes) == 0 {
		errs = append(errs, errors.New("classes: at least one class is needed"))
	}
	if len(s.Classes) > MaxClasses {
		bad("classes", len(s.Classes), fmt.Sprintf("classes exceed the limit of %d", MaxClasses))
	}
	seen := map[string]int{}
	var total float64
	for i, c := range s.Classes {
		p := fmt.Sprintf("classes[%d]", i)
		if c.Name == "" {
			errs = append(errs, fmt.Errorf("%s.name: must be set", p))
		} else if strings.ContainsAny(c.Name, " \t\r\n\"'<>&") {
			bad(p+".name", c.Name, "must not contain spaces, quotes or <>&")
		} else if j, dup := seen[c.Name]; dup {
			bad(p+".name", c.Name, fmt.Sprintf("duplicates classes[%d].name", j))
		} else {
			seen[c.Name] = i
		}
		if !(c.Share >= 0) || math.IsInf(c.Share, 0) {
			bad(p+".share", c.Share, "must be a non-negative number")
		} else {
			total += c.Share
		}
		if c.SLO.TTFT < 0 {
			bad(p+".slo.ttft", c.SLO.TTFT.D(), "must be positive")
		}
		if c.SLO.TPOT < 0 {
			bad(p+".slo.tpot", c.SLO.TPOT.D(), "must be positive")
		}
		if !(c.AttainmentTarget > 0 && c.AttainmentTarget <= 1) {
			bad(p+".attainment_target", c.AttainmentTarget, "must be in (0, 1]")
		}
		errs = append(errs, c.Prompt.validate(p+".prompt_tokens", a.Process, 0)...)
		if c.SystemPromptTokens < 0 || c.SystemPromptTokens > MaxLength {
			bad(p+".system_prompt_tokens", c.SystemPromptTokens, fmt.Sprintf("must be in [0, %d]", MaxLength))
		}
		if ss := c.Session; ss != nil {
			switch a.Process {
			case ArrivalConstant, ArrivalPoisson, ArrivalGamma:
			default:
				bad(p+".session", a.Process, "needs arrival process constant, poisson or gamma (sessions arrive by rate)")
			}
			for _, d := range []struct {
				dist   Dist
				field  string
				minLen int
			}{{ss.Turns, "turns", 1}, {ss.ThinkTimeMS, "think_time_ms", 0}} {
				if d.dist.Kind == DistTrace || d.dist.Kind == DistEmpirical {
					bad(p+".session."+d.field+".kind", d.dist.Kind, "must be fixed, uniform or lognormal")
					continue
				}
				errs = append(errs, d.dist.validate(p+".session."+d.field, a.Process, d.minLen)...)
			}
			if ss.MaxContextTokens < 0 || ss.MaxContextTokens > MaxLength {
				bad(p+".session.max_context_tokens", ss.MaxContextTokens, fmt.Sprintf("must be in [0, %d] (0: no cap)", MaxLength))
			}
		}
		errs = append(errs, c.Output.validate(p+".output_tokens", a.Process, 1)...)
		for k, v := range c.Headers {
			if k == "" || strings.ContainsAny(k, " \t\r\n:") || k != strings.TrimSpace(k) {
				bad(p+".headers", k, "is not a valid header name")
			}
			if strings.ContainsAny(v, "\r\n") {
				bad(p+".headers."+textproto.CanonicalMIMEHeaderKey(k), v, "must not contain line breaks")
			}
		}
	}
	if len(s.Classes) > 0 && !(total > 0) {
		errs = append(errs, errors.New("classes[*].share: at least one class needs a positive share"))
	}
	errs = append(errs, s.validatePrimaries()...)
	return errors.Join(errs...)
}

// validate checks a length distribution; minLen is the smallest legal
// length (outputs need at least one token).
func (d Dist) validate(path, process string, minLen int) []error {
	var errs []error
	bad := func(field string, v any, why string) {
		errs = append(errs, fmt.Errorf("%s.%s: %s %s", path, field, quote(v), why))
	}
	inRange := func(field string, v int) {
		if v < minLen || v > MaxLength {
			bad(field, v, fmt.Sprintf("must be in [%d, %d]", minLen, MaxLength))
		}
	}
	switch d.Kind {
	case DistFixed:
		inRange("value", d.Value)
	case DistUniform:
		inRange("min", d.Min)
		inRange("max", d.Max)
		if d.Max < d.Min {
			bad("max", d.Max, fmt.Sprintf("must be ≥ min (%d)", d.Min))
		}
	case DistLognormal:
		if !(d.Median >= 1) || d.Median > MaxLength {
			bad("median", d.Median, fmt.Sprintf("must be in [1, %d]", MaxLength))
		}
		if !(d.Sigma >= 0) || d.Sigma > 10 {
			bad("sigma", d.Sigma, "must be in [0, 10]")
		}
	case DistEmpirical:
		if d.Trace == "" {
			errs = append(errs, fmt.Errorf("%s.trace: must name an Azure-format CSV for kind empirical", path))
		}
		if d.Column != "context" && d.Column != "generated" {
			bad("column", d.Column, "must be context or generated")
		}
	case DistTrace:
		if process != ArrivalTrace {
			bad("kind", d.Kind, "needs arrival.process trace")
		}
	case "":
		errs = append(errs, fmt.Errorf("%s.kind: must be set (fixed, uniform, lognormal, empirical, trace)", path))
	default:
		bad("kind", d.Kind, "must be one of fixed, uniform, lognormal, empirical, trace")
	}
	if d.Kind == DistLognormal || d.Kind == DistEmpirical {
		if d.Min != 0 {
			inRange("min", d.Min)
		}
		if d.Max != 0 {
			inRange("max", d.Max)
			if d.Max < d.Min {
				bad("max", d.Max, fmt.Sprintf("must be ≥ min (%d)", d.Min))
			}
		}
	}
	return errs
}

func quote(v any) string {
	switch v := v.(type) {
	case string:
		return fmt.Sprintf("%q", v)
	case time.Duration:
		return fmt.Sprintf("%q", v.String())
	case float64:
		return fmt.Sprintf("%g", v)
	}
	return fmt.Sprint(v)
}
