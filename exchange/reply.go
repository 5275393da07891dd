package exchange

import (
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/llmesh/llmesh/exchange/relocate"
	"github.com/llmesh/llmesh/scheduler"
)

// Error classes a host answers itself, besides the scheduler's
// (scheduler.ErrQueueFull…), relocation's (relocate.ErrTooLarge…) and the
// engine-priority guard's (ErrPriorityBody, ErrPriorityTooLarge). Hosts
// wrap the specific cause: fmt.Errorf("%w: %w", ErrUpstream, err).
var (
	// ErrNoRoute: no route or pool takes the request.
	ErrNoRoute = errors.New("no route")
	// ErrRequestTooLarge: the request body exceeds the host's limit.
	ErrRequestTooLarge = errors.New("request too large")
	// ErrBadRequest: the request could not be read.
	ErrBadRequest = errors.New("bad request")
	// ErrUpstreamTimeout: the upstream sent nothing for the idle timeout
	// before the response started.
	ErrUpstreamTimeout = errors.New("upstream timeout")
	// ErrUpstream: the upstream could not be reached or failed before the
	// response started.
	ErrUpstream = errors.New("upstream unavailable")
	// ErrInternal: a fault of llmesh itself (a panic, an unknown error).
	ErrInternal = errors.New("internal error")
)

// Reply is what a client is told when a host ends its request itself:
// the one error → status table both hosts and relocation use.
type Reply struct {
	// HTTPStatus is the response status for HTTP clients; 499 (client
	// gone) is for logs only.
	HTTPStatus int
	// GRPCCode is the grpc-status for gRPC clients.
	GRPCCode int
	// Type is the OpenAI error object's "type".
	Type string
	// Message is the error's text: the cause, as the host wrapped it.
	Message string
	// Retryable replies carry a retry hint: Retry-After (HTTP) or
	// grpc-retry-pushback-ms (gRPC).
	Retryable bool
	// Details names the cause without spaces (Envoy's response code
	// details, the x-llmesh-reply header).
	Details string
}

// gRPC status codes, as numbers so that the core needs no gRPC import.
const (
	grpcCanceled          = 1
	grpcInvalidArgument   = 3
	grpcResourceExhausted = 8
	grpcUnimplemented     = 12
	grpcInternal          = 13
	grpcUnavailable       = 14
)

// ReplyFor maps err to the reply a client sees. The order matters where
// classes nest (a preemption mid-stream wraps scheduler.ErrPreempted).
func ReplyFor(err error) Reply {
	r := replyClass(err)
	if err != nil {
		r.Message = err.Error()
	} else {
		r.Message = r.Type
	}
	return r
}

func replyClass(err error) Reply {
	switch {
	case errors.Is(err, scheduler.ErrPreempted):
		return Reply{HTTPStatus: 503, GRPCCode: grpcUnavailable, Type: "unavailable", Retryable: true, Details: "llmesh_preempted"}
	case errors.Is(err, scheduler.ErrQueueFull):
		return Reply{HTTPStatus: 429, GRPCCode: grpcResourceExhausted, Type: "queue_full", Retryable: true, Details: "llmesh_queue_full"}
	case errors.Is(err, scheduler.ErrCancelled):
		return Reply{HTTPStatus: 499, GRPCCode: grpcCanceled, Type: "cancelled", Details: "llmesh_cancelled"}
	case errors.Is(err, scheduler.ErrUnavailable), errors.Is(err, scheduler.ErrClosed):
		return Reply{HTTPStatus: 503, GRPCCode: grpcUnavailable, Type: "unavailable", Retryable: true, Details: "llmesh_scheduler_unavailable"}
	case errors.Is(err, scheduler.ErrRejected):
		return Reply{HTTPStatus: 503, GRPCCode: grpcUnavailable, Type: "unavailable", Retryable: true, Details: "llmesh_rejected"}
	case errors.Is(err, relocate.ErrTooLarge):
		return Reply{HTTPStatus: 413, GRPCCode: grpcResourceExhausted, Type: "invalid_request_error", Details: "llmesh_relocation"}
	case errors.Is(err, relocate.ErrCompressed), errors.Is(err, relocate.ErrEncoding):
		return Reply{HTTPStatus: 415, GRPCCode: grpcUnimplemented, Type: "invalid_request_error", Details: "llmesh_relocation"}
	case errors.Is(err, relocate.ErrInvalidValue), errors.Is(err, relocate.ErrMalformed):
		return Reply{HTTPStatus: 400, GRPCCode: grpcInvalidArgument, Type: "invalid_request_error", Details: "llmesh_relocation"}
	case errors.Is(err, ErrPriorityTooLarge):
		return Reply{HTTPStatus: 413, GRPCCode: grpcResourceExhausted, Type: "request_too_large", Details: "llmesh_priority_body"}
	case errors.Is(err, errPriorityEncoding):
		return Reply{HTTPStatus: 415, GRPCCode: grpcInvalidArgument, Type: "bad_request", Details: "llmesh_priority_body"}
	case errors.Is(err, ErrPriorityBody):
		return Reply{HTTPStatus: 400, GRPCCode: grpcInvalidArgument, Type: "bad_request", Details: "llmesh_priority_body"}
	case errors.Is(err, errPickNotInPool):
		return Reply{HTTPStatus: 503, GRPCCode: grpcUnavailable, Type: "unavailable", Details: "llmesh_pick_not_in_pool"}
	case errors.Is(err, ErrNoRoute):
		return Reply{HTTPStatus: 404, GRPCCode: grpcUnimplemented, Type: "no_route", Details: "llmesh_no_route"}
	case errors.Is(err, ErrRequestTooLarge):
		return Reply{HTTPStatus: 413, GRPCCode: grpcResourceExhausted, Type: "request_too_large", Details: "llmesh_request_too_large"}
	case errors.Is(err, ErrBadRequest):
		return Reply{HTTPStatus: 400, GRPCCode: grpcInvalidArgument, Type: "bad_request", Details: "llmesh_bad_request"}
	case errors.Is(err, ErrUpstreamTimeout):
		return Reply{HTTPStatus: 504, GRPCCode: grpcUnavailable, Type: "upstream_timeout", Details: "llmesh_upstream_timeout"}
	case errors.Is(err, ErrUpstream):
		return Reply{HTTPStatus: 502, GRPCCode: grpcUnavailable, Type: "upstream_unavailable", Details: "llmesh_upstream"}
	}
	return Reply{HTTPStatus: 500, GRPCCode: grpcInternal, Type: "internal_error", Details: "llmesh_internal"}
}

// OpenAIBody is the reply as an OpenAI error object:
// {"error":{"message":…,"type":…,"code":<HTTP status>}}.
func (r Reply) OpenAIBody() []byte {
	return AppendOpenAIError(nil, r.HTTPStatus, r.Type, r.Message)
}

// AppendOpenAIError appends an OpenAI error object to b.
func AppendOpenAIError(b []byte, status int, typ, msg string) []byte {
	b = append(b, `{"error":{"message":`...)
	b = appendJSONString(b, msg)
	b = append(b, `,"type":`...)
	b = appendJSONString(b, typ)
	b = append(b, `,"code":`...)
	b = strconv.AppendInt(b, int64(status), 10)
	return append(b, "}}"...)
}

func appendJSONString(b []byte, s string) []byte {
	q, _ := json.Marshal(s) // a string always marshals
	return append(b, q...)
}

// RetryAfter is the Retry-After value (whole seconds, at least 1) for a
// retry hint of d.
func RetryAfter(d time.Duration) string {
	return strconv.FormatInt(int64(max((d+time.Second-1)/time.Second, 1)), 10)
}

// Pushback is the grpc-retry-pushback-ms value for a retry hint of d.
func Pushback(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }

// GRPCMessage percent-encodes a grpc-message value as the gRPC HTTP/2
// protocol asks: bytes outside printable ASCII (0x20–0x7E), and '%', are
// sent as %XX. A message that needs none is returned as it is.
func GRPCMessage(s string) string {
	n := 0
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '%' {
			n++
		}
	}
	if n == 0 {
		return s
	}
	const hex = "0123456789ABCDEF"
	b := make([]byte, 0, len(s)+2*n)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c <= 0x7e && c != '%' {
			b = append(b, c)
			continue
		}
		b = append(b, '%', hex[c>>4], hex[c&0xf])
	}
	return string(b)
}
