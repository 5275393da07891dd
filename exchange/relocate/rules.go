package relocate

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"
)

// Defaults applied by Compile to zero fields.
const (
	// DefaultThresholdBytes: values of at least 4 KiB (about a thousand
	// tokens) are relocated; smaller ones are cheap enough as headers.
	DefaultThresholdBytes = 4 << 10
	// DefaultMax is the largest relocated value accepted (decoded bytes).
	DefaultMax = 16 << 20
	// DefaultMaxMessage bounds the first gRPC message after relocation (and
	// after decompression), which is also the most the rewriter buffers.
	DefaultMaxMessage = 32 << 20
	// DefaultMaxBody bounds a JSON body after relocation, which is also the
	// most the JSON rewriter buffers.
	DefaultMaxBody = 32 << 20
	// BytesPerToken is the estimate used by token thresholds.
	BytesPerToken = 4
)

// FieldType is the protobuf type of the field a gRPC rule writes. Both are
// length-delimited on the wire; string additionally requires valid UTF-8,
// because proto3 parsers reject a string field that is not.
type FieldType int

const (
	// String writes a proto3 string field (value must be valid UTF-8).
	String FieldType = iota
	// Bytes writes a bytes field (any value).
	Bytes
)

func (t FieldType) String() string {
	if t == Bytes {
		return "bytes"
	}
	return "string"
}

// CompressedPolicy says what a gRPC rule does when the first request message
// is compressed (frame flag 1).
type CompressedPolicy int

const (
	// Recompress decompresses a gzip message, appends the field and
	// compresses it again.
	Recompress CompressedPolicy = iota
	// Refuse rejects compressed first messages (ErrCompressed).
	Refuse
)

// Threshold decides whether a value is large enough to relocate. A value is
// relocated when it has at least Bytes bytes or at least Tokens estimated
// tokens (bytes/BytesPerToken); a zero field does not take part, and a zero
// Threshold relocates every value.
type Threshold struct {
	Bytes  int
	Tokens int
}

// Reached reports whether a value of n bytes passes the threshold.
func (t Threshold) Reached(n int) bool {
	if t.Bytes == 0 && t.Tokens == 0 {
		return true
	}
	return (t.Bytes > 0 && n >= t.Bytes) || (t.Tokens > 0 && n/BytesPerToken >= t.Tokens)
}

// GRPCRule moves one metadata value into a field of the first request
// message of a gRPC call.
type GRPCRule struct {
	// Method, when set, limits the rule to one full method name
	// ("/llm.v1.Generation/Generate"); empty matches every method.
	Method string
	// Key is the metadata key, matched case-insensitively. A key ending in
	// "-bin" carries base64 (padded or not, as gRPC sends it) that is decoded
	// before relocation.
	Key string
	// Field is the protobuf field number written (1..536870911, not
	// 19000..19999).
	Field int
	// Type is the field's protobuf type.
	Type FieldType
	// Threshold: smaller values stay in the metadata. Zero means
	// DefaultThresholdBytes.
	Threshold Threshold
	// Max is the largest decoded value relocated; larger ones fail with a
	// LimitError. Zero means DefaultMax, or MaxMessage when that is smaller.
	Max int
	// MaxMessage bounds the first message after relocation (decompressed).
	// Zero means DefaultMaxMessage.
	MaxMessage int
	// Compressed is the policy for compressed first messages.
	Compressed CompressedPolicy

	path      string // config path for error messages, set by Compile
	limitPath string // config path of MaxMessage, set by Compile
}

// HTTPRule moves one header value into an OpenAI-style JSON request body.
type HTTPRule struct {
	// PathPrefix, when set, limits the rule to paths starting with it.
	PathPrefix string
	// Header is the request header, matched case-insensitively.
	Header string
	// Field is the top-level JSON field set to the value. Empty or "prompt"
	// means: paths ending in "/chat/completions" (which have no prompt
	// field) get a user message appended to "messages", every other path
	// gets "prompt". "messages" always appends a user message.
	Field string
	// Threshold: smaller values stay in the header. Zero means
	// DefaultThresholdBytes.
	Threshold Threshold
	// Max is the largest value relocated (bytes as sent). Zero means
	// DefaultMax, or MaxBody when that is smaller.
	Max int
	// MaxBody bounds the body after relocation. Zero means DefaultMaxBody.
	MaxBody int

	path      string // config path for error messages, set by Compile
	limitPath string // config path of MaxBody, set by Compile
}

// Config is the relocation section of the mesh config in runtime form.
type Config struct {
	GRPC []GRPCRule
	HTTP []HTTPRule

	// sectionLimits: MaxMessage and MaxBody come from the mesh config's
	// section-wide relocation.max_message and max_body (FromConfig), so
	// limit errors name those fields rather than per-rule ones.
	sectionLimits bool
}

// Relocator holds compiled rules. It is immutable and safe for concurrent
// use; a host swaps in a new one when the configuration changes.
type Relocator struct {
	grpc []GRPCRule
	http []HTTPRule
}

// Compile applies defaults and validates cfg. Errors name the field path
// (relocation.grpc[0].field) and the bad value; all problems are reported
// at once.
func Compile(cfg Config) (*Relocator, error) {
	var errs []error
	bad := func(path, format string, args ...any) {
		errs = append(errs, fmt.Errorf("relocation.%s: "+format, append([]any{path}, args...)...))
	}
	r := &Relocator{}
	for i, g := range cfg.GRPC {
		p := fmt.Sprintf("grpc[%d]", i)
		g.Key = strings.ToLower(strings.TrimSpace(g.Key))
		if g.Key == "" {
			bad(p+".metadata", "required")
		} else if strings.HasPrefix(g.Key, ":") || strings.HasPrefix(g.Key, "grpc-") {
			bad(p+".metadata", "%q is reserved by gRPC/HTTP2", g.Key)
		}
		if g.Field < 1 || g.Field > int(protowire.MaxValidNumber) {
			bad(p+".field", "%d must be in 1..%d", g.Field, protowire.MaxValidNumber)
		} else if g.Field >= int(protowire.FirstReservedNumber) && g.Field <= int(protowire.LastReservedNumber) {
			bad(p+".field", "%d is in protobuf's reserved range %d..%d", g.Field, protowire.FirstReservedNumber, protowire.LastReservedNumber)
		}
		if g.Type != String && g.Type != Bytes {
			bad(p+".type", "%d is neither string nor bytes", g.Type)
		}
		if g.Compressed != Recompress && g.Compressed != Refuse {
			bad(p+".compressed", "%d is neither recompress nor refuse", g.Compressed)
		}
		checkThreshold(bad, p, &g.Threshold)
		checkLimit(bad, p+".max_message", &g.MaxMessage, DefaultMaxMessage)
		checkLimit(bad, p+".max", &g.Max, min(DefaultMax, g.MaxMessage))
		if g.MaxMessage > math.MaxUint32 {
			bad(p+".max_message", "%d exceeds the gRPC frame limit %d", g.MaxMessage, uint32(math.MaxUint32))
		}
		if g.Max > g.MaxMessage {
			bad(p+".max", "%d exceeds max_message %d: such a value could never fit", g.Max, g.MaxMessage)
		}
		g.path = "relocation." + p
		g.limitPath = g.path + ".max_message"
		if cfg.sectionLimits {
			g.limitPath = "relocation.max_message"
		}
		r.grpc = append(r.grpc, g)
	}
	for i, h := range cfg.HTTP {
		p := fmt.Sprintf("http[%d]", i)
		h.Header = strings.TrimSpace(h.Header)
		if h.Header == "" {
			bad(p+".header", "required")
		}
		if h.PathPrefix != "" && !strings.HasPrefix(h.PathPrefix, "/") {
			bad(p+".path_prefix", "%q must start with /", h.PathPrefix)
		}
		if strings.ContainsAny(h.Field, "\"\\") {
			bad(p+".field", "%q must not contain quotes or backslashes", h.Field)
		}
		checkThreshold(bad, p, &h.Threshold)
		checkLimit(bad, p+".max_body", &h.MaxBody, DefaultMaxBody)
		checkLimit(bad, p+".max", &h.Max, min(DefaultMax, h.MaxBody))
		if h.Max > h.MaxBody {
			bad(p+".max", "%d exceeds max_body %d: such a value could never fit", h.Max, h.MaxBody)
		}
		h.path = "relocation." + p
		h.limitPath = h.path + ".max_body"
		if cfg.sectionLimits {
			h.limitPath = "relocation.max_body"
		}
		r.http = append(r.http, h)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return r, nil
}

func checkThreshold(bad func(string, string, ...any), p string, t *Threshold) {
	if t.Bytes < 0 {
		bad(p+".threshold", "%d must not be negative", t.Bytes)
	}
	if t.Tokens < 0 {
		bad(p+".threshold_tokens", "%d must not be negative", t.Tokens)
	}
	if t.Bytes == 0 && t.Tokens == 0 {
		t.Bytes = DefaultThresholdBytes
	}
}

func checkLimit(bad func(string, string, ...any), path string, v *int, def int) {
	switch {
	case *v < 0:
		bad(path, "%d must not be negative", *v)
	case *v == 0:
		*v = def
	}
}

// Headers is the read view a host gives of its request headers: every
// value of a header by case-insensitive name. net/http.Header satisfies it;
// the Envoy adapter's header map does too.
type Headers interface {
	Values(key string) []string
}

// GRPCPlan is a relocation decided from a gRPC request's headers: the host
// removes Key from the headers and rewrites the body with NewGRPCReader or
// NewGRPCRewriter.
type GRPCPlan struct {
	Rule  *GRPCRule
	Key   string
	Value Value
}

// PlanGRPC picks the first rule whose method and key match and whose value
// passes the threshold. It returns nil without error when nothing is to be
// relocated, and an error (ErrInvalidValue, or a LimitError over Max) when a
// matching value cannot be relocated.
func (r *Relocator) PlanGRPC(method string, h Headers) (*GRPCPlan, error) {
	if r == nil {
		return nil, nil
	}
	for i := range r.grpc {
		rule := &r.grpc[i]
		if rule.Method != "" && rule.Method != method {
			continue
		}
		vs := h.Values(rule.Key)
		if len(vs) == 0 {
			continue
		}
		v, err := parseValue(rule.Key, vs)
		if err != nil {
			return nil, err
		}
		if !rule.Threshold.Reached(v.Len()) {
			continue
		}
		if v.Len() > rule.Max {
			return nil, &LimitError{Limit: rule.path + ".max", What: "metadata " + rule.Key, Size: int64(v.Len()), Max: int64(rule.Max)}
		}
		return &GRPCPlan{Rule: rule, Key: rule.Key, Value: v}, nil
	}
	return nil, nil
}

// HTTPPlan is a relocation decided from an HTTP request's path and headers:
// the host removes Header and rewrites the JSON body with RewriteJSON.
type HTTPPlan struct {
	Rule   *HTTPRule
	Header string
	Value  string
	// Chat is true when the value becomes a user message in "messages";
	// otherwise it sets Field.
	Chat  bool
	Field string
}

// PlanHTTP picks the first rule whose path prefix and header match and whose
// value passes the threshold; nil without error when nothing is to be
// relocated. A body with a Content-Encoding other than identity cannot be
// rewritten (ErrEncoding).
func (r *Relocator) PlanHTTP(path string, h Headers) (*HTTPPlan, error) {
	if r == nil {
		return nil, nil
	}
	for i := range r.http {
		rule := &r.http[i]
		if rule.PathPrefix != "" && !strings.HasPrefix(path, rule.PathPrefix) {
			continue
		}
		vs := h.Values(rule.Header)
		if len(vs) == 0 {
			continue
		}
		if len(vs) > 1 {
			return nil, fmt.Errorf("%w: header %s appears %d times; send the prompt once", ErrInvalidValue, rule.Header, len(vs))
		}
		if !rule.Threshold.Reached(len(vs[0])) {
			continue
		}
		if len(vs[0]) > rule.Max {
			return nil, &LimitError{Limit: rule.path + ".max", What: "header " + rule.Header, Size: int64(len(vs[0])), Max: int64(rule.Max)}
		}
		for _, ce := range h.Values("Content-Encoding") {
			if ce = strings.TrimSpace(ce); ce != "" && !strings.EqualFold(ce, "identity") {
				return nil, fmt.Errorf("%w: the body has Content-Encoding %q; send it uncompressed to have header %s moved into it", ErrEncoding, ce, rule.Header)
			}
		}
		p := &HTTPPlan{Rule: rule, Header: rule.Header, Value: vs[0], Field: rule.Field}
		switch {
		case rule.Field == "messages":
			p.Chat = true
		case (rule.Field == "" || rule.Field == "prompt") && strings.HasSuffix(path, "/chat/completions"):
			p.Chat, p.Field = true, "messages"
		case rule.Field == "":
			p.Field = "prompt"
		}
		return p, nil
	}
	return nil, nil
}

// CheckBodySize returns a LimitError when a body of n bytes (its
// Content-Length, -1 when unknown) is already over the rule's MaxBody, so a
// host can refuse it before reading.
func (p *HTTPPlan) CheckBodySize(n int64) error {
	if n > int64(p.Rule.MaxBody) {
		return &LimitError{Limit: p.Rule.limitPath, What: "request body", Size: n, Max: int64(p.Rule.MaxBody)}
	}
	return nil
}
