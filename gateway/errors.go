package gateway

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/llmesh/llmesh/exchange"
	"github.com/llmesh/llmesh/scheduler"
)

// timeoutError is an error that says it is a timeout.
type timeoutError string

func (e timeoutError) Error() string { return string(e) }
func (timeoutError) Timeout() bool   { return true }

// Is makes a timeout an upstream timeout for the reply table.
func (timeoutError) Is(target error) bool { return target == exchange.ErrUpstreamTimeout }

// Errors the gateway produces itself; observations carry them so metrics
// and logs can tell what ended a request.
var (
	// ErrUpstreamStalled: the upstream sent nothing for the idle timeout.
	// It is a timeout (Timeout() is true), so the observation's error kind
	// is exchange.ErrorTimeout, as the client is told.
	ErrUpstreamStalled error = timeoutError("gateway: upstream stalled")
	// ErrUpstreamReset: the upstream connection ended in the middle of a
	// response.
	ErrUpstreamReset = errors.New("gateway: upstream reset mid-stream")
	// ErrPreemptedMidStream: the scheduler preempted a request that had
	// already streamed to the client and whose API allows no continuation.
	ErrPreemptedMidStream = fmt.Errorf("gateway: mid-stream: %w", scheduler.ErrPreempted)
	// ErrContinuationRestarted: the engine answered a continuation request
	// by starting its answer over (it ignored continue_final_message), so
	// the stream ends instead of repeating text; retryable like
	// ErrPreemptedMidStream, which it wraps.
	ErrContinuationRestarted = fmt.Errorf("%w: the engine restarted the answer instead of continuing it", ErrPreemptedMidStream)
	// ErrBodyTooLarge: the request body exceeds the configured limit.
	ErrBodyTooLarge = fmt.Errorf("gateway: %w", exchange.ErrRequestTooLarge)
)

// retryAfter is what rejected clients are told to wait.
const retryAfter = time.Second

// grpcKind is r's gRPC flavour (exchange.GRPCKindOf); any kind but
// exchange.GRPCNone is routed and answered as gRPC.
func grpcKind(r *http.Request) exchange.GRPCKind {
	return exchange.GRPCKindOf(r.Header.Get("Content-Type"))
}

// reply answers a not-yet-started request with the core's reply for err
// (exchange.ReplyFor): an OpenAI error body for HTTP, a trailers-only
// response carrying a real status for gRPC (of the request's kind: a
// gRPC-Web client reads the same status headers). Retryable replies carry
// Retry-After or grpc-retry-pushback-ms. A client that is gone (499) is
// not answered.
func reply(w http.ResponseWriter, kind exchange.GRPCKind, err error) {
	r := exchange.ReplyFor(err)
	h := w.Header()
	if kind != exchange.GRPCNone {
		h.Set("Content-Type", kind.ContentType())
		h.Set("Grpc-Status", strconv.Itoa(r.GRPCCode))
		h.Set("Grpc-Message", exchange.GRPCMessage(r.Message))
		if r.Retryable {
			h.Set("Grpc-Retry-Pushback-Ms", exchange.Pushback(retryAfter))
		}
		w.WriteHeader(http.StatusOK)
		return
	}
	if r.HTTPStatus == 499 { // the client is gone; nobody reads this
		return
	}
	h.Set("Content-Type", "application/json")
	if r.Retryable {
		h.Set("Retry-After", exchange.RetryAfter(retryAfter))
	}
	w.WriteHeader(r.HTTPStatus)
	_, _ = w.Write(r.OpenAIBody())
}
