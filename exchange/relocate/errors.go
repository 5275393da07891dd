package relocate

import (
	"errors"
	"fmt"
)

// Error classes callers branch on; the specific cause is wrapped.
var (
	// ErrTooLarge: a configured limit was exceeded. The concrete error is
	// a *LimitError naming it. What a client is told for each class is the
	// core's error table (exchange.ReplyFor).
	ErrTooLarge = errors.New("relocate: too large")
	// ErrInvalidValue: the header value cannot be relocated (bad base64,
	// not UTF-8 for a string field, repeated header).
	ErrInvalidValue = errors.New("relocate: invalid value")
	// ErrMalformed: the request body is not what the rule expects (a broken
	// gRPC frame, a truncated first message, a body that is not a JSON
	// object).
	ErrMalformed = errors.New("relocate: malformed body")
	// ErrCompressed: the first message is compressed and the rule refuses
	// compressed messages.
	ErrCompressed = errors.New("relocate: compressed message refused")
	// ErrEncoding: the first message is compressed with an encoding other
	// than gzip (or flagged compressed without any encoding), or a JSON body
	// has a Content-Encoding.
	ErrEncoding = errors.New("relocate: unsupported grpc-encoding")
)

// LimitError reports which configured limit a request exceeded.
type LimitError struct {
	// Limit is the config field path, e.g. "relocation.grpc[0].max".
	Limit string
	// What was measured, e.g. "metadata x-prompt-raw" or "first message".
	What string
	// Size is the measured size; it may be a lower bound when the rewriter
	// stopped reading early.
	Size int64
	// Max is the limit's value in bytes.
	Max int64
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("relocate: %s of %d bytes exceeds %s = %d bytes", e.What, e.Size, e.Limit, e.Max)
}

// Is makes errors.Is(err, ErrTooLarge) true.
func (e *LimitError) Is(target error) bool { return target == ErrTooLarge }
