package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/llmesh/llmesh/scheduler"
	"google.golang.org/grpc/codes"
)

// timeoutError is an error that says it is a timeout.
type timeoutError string

func (e timeoutError) Error() string { return string(e) }
func (timeoutError) Timeout() bool   { return true }

// Errors the gateway produces itself; observations carry them so metrics
// and logs can tell what ended a request.
var (
	// ErrUpstreamStalled: the upstream sent nothing for the idle timeout.
	// It is a timeout (Timeout() is true), so the observation's error kind
	// is filter.ErrorTimeout, as the client is told.
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
	ErrBodyTooLarge = errors.New("gateway: request body too large")
)

// retryAfter is what rejected clients are told to wait.
const retryAfter = time.Second

// isGRPC reports whether r is a gRPC request.
func isGRPC(r *http.Request) bool {
	ct := r.Header.Get("Content-Type")
	return len(ct) >= 16 && ct[:16] == "application/grpc"
}

// openAIError is the OpenAI error body shape.
type openAIError struct {
	Error openAIErrorBody `json:"error"`
}

type openAIErrorBody struct {
	Message string `json:"message"`
	Type    string `json:"type"`
	Code    int    `json:"code"`
}

func errorJSON(status int, typ, msg string) []byte {
	b, _ := json.Marshal(openAIError{Error: openAIErrorBody{Message: msg, Type: typ, Code: status}})
	return b
}

// writeHTTPError answers a not-yet-started HTTP request with an OpenAI
// error body.
func writeHTTPError(w http.ResponseWriter, status int, typ, msg string) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if status == http.StatusServiceUnavailable || status == http.StatusTooManyRequests {
		h.Set("Retry-After", strconv.Itoa(int(retryAfter/time.Second)))
	}
	w.WriteHeader(status)
	_, _ = w.Write(errorJSON(status, typ, msg))
}

// writeGRPCError answers a not-yet-started gRPC request with a
// trailers-only response carrying a real status.
func writeGRPCError(w http.ResponseWriter, code codes.Code, msg string, pushback time.Duration) {
	h := w.Header()
	h.Set("Content-Type", "application/grpc")
	h.Set("Grpc-Status", strconv.Itoa(int(code)))
	h.Set("Grpc-Message", grpcEncodeMessage(msg))
	if pushback > 0 {
		h.Set("Grpc-Retry-Pushback-Ms", strconv.FormatInt(pushback.Milliseconds(), 10))
	}
	w.WriteHeader(http.StatusOK)
}

// grpcEncodeMessage percent-encodes a grpc-message value as the gRPC HTTP/2
// spec asks (printable ASCII except %, everything else encoded).
func grpcEncodeMessage(s string) string {
	safe := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '%' {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return url.PathEscape(s)
}

// admitFailure maps an admission error to an HTTP status, an OpenAI error
// type and a gRPC code.
func admitFailure(err error) (status int, typ string, code codes.Code) {
	switch {
	case errors.Is(err, scheduler.ErrQueueFull):
		return http.StatusTooManyRequests, "queue_full", codes.ResourceExhausted
	case errors.Is(err, scheduler.ErrCancelled):
		// The client is gone; the status is for logs only.
		return 499, "cancelled", codes.Canceled
	default: // rejected, timed out, unavailable, closed, preempted
		return http.StatusServiceUnavailable, "unavailable", codes.Unavailable
	}
}
