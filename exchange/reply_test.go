package exchange

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/llmesh/llmesh/exchange/relocate"
	"github.com/llmesh/llmesh/scheduler"
)

// TestReplyFor is the error → client status table both hosts answer
// with: one row per error class.
func TestReplyFor(t *testing.T) {
	for _, tc := range []struct {
		err        error
		http, grpc int
		typ        string
		retry      bool
		details    string
	}{
		{scheduler.ErrPreempted, 503, 14, "unavailable", true, "llmesh_preempted"},
		{fmt.Errorf("mid-stream: %w", scheduler.ErrPreempted), 503, 14, "unavailable", true, "llmesh_preempted"},
		{fmt.Errorf("%w: class \"x\" has 1 waiting", scheduler.ErrQueueFull), 429, 8, "queue_full", true, "llmesh_queue_full"},
		{scheduler.ErrCancelled, 499, 1, "cancelled", false, "llmesh_cancelled"},
		{scheduler.ErrUnavailable, 503, 14, "unavailable", true, "llmesh_scheduler_unavailable"},
		{scheduler.ErrClosed, 503, 14, "unavailable", true, "llmesh_scheduler_unavailable"},
		{fmt.Errorf("%w: waited 31ms", scheduler.ErrRejected), 503, 14, "unavailable", true, "llmesh_rejected"},
		{&relocate.LimitError{Limit: "relocation.http[0].max"}, 413, 8, "invalid_request_error", false, "llmesh_relocation"},
		{relocate.ErrCompressed, 415, 12, "invalid_request_error", false, "llmesh_relocation"},
		{relocate.ErrEncoding, 415, 12, "invalid_request_error", false, "llmesh_relocation"},
		{relocate.ErrInvalidValue, 400, 3, "invalid_request_error", false, "llmesh_relocation"},
		{relocate.ErrMalformed, 400, 3, "invalid_request_error", false, "llmesh_relocation"},
		{ErrPriorityTooLarge, 413, 8, "request_too_large", false, "llmesh_priority_body"},
		{fmt.Errorf("%w: content-encoding gzip", errPriorityEncoding), 415, 3, "bad_request", false, "llmesh_priority_body"},
		{ErrPriorityBody, 400, 3, "bad_request", false, "llmesh_priority_body"},
		{fmt.Errorf("%w: x-gateway-destination-endpoint: \"10.0.0.3:80\"", errPickNotInPool), 503, 14, "unavailable", false, "llmesh_pick_not_in_pool"},
		{fmt.Errorf("%w for /x", ErrNoRoute), 404, 12, "no_route", false, "llmesh_no_route"},
		{ErrRequestTooLarge, 413, 8, "request_too_large", false, "llmesh_request_too_large"},
		{ErrBadRequest, 400, 3, "bad_request", false, "llmesh_bad_request"},
		{ErrUpstreamTimeout, 504, 14, "upstream_timeout", false, "llmesh_upstream_timeout"},
		{fmt.Errorf("%w: dial tcp: refused", ErrUpstream), 502, 14, "upstream_unavailable", false, "llmesh_upstream"},
		{errors.New("other"), 500, 13, "internal_error", false, "llmesh_internal"},
	} {
		r := ReplyFor(tc.err)
		want := Reply{HTTPStatus: tc.http, GRPCCode: tc.grpc, Type: tc.typ, Message: tc.err.Error(), Retryable: tc.retry, Details: tc.details}
		if r != want {
			t.Errorf("ReplyFor(%v) = %+v, want %+v", tc.err, r, want)
		}
	}
}

func TestOpenAIBody(t *testing.T) {
	r := ReplyFor(fmt.Errorf("%w: class \"lim\" \u00fc\n", scheduler.ErrQueueFull))
	var got struct {
		Error struct {
			Message string `json:"message"`
			Type    string `json:"type"`
			Code    int    `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(r.OpenAIBody(), &got); err != nil {
		t.Fatalf("%s: %v", r.OpenAIBody(), err)
	}
	if got.Error.Message != r.Message || got.Error.Type != "queue_full" || got.Error.Code != 429 {
		t.Errorf("body %s decodes to %+v", r.OpenAIBody(), got)
	}
}

func TestGRPCMessage(t *testing.T) {
	for in, want := range map[string]string{
		"plain text: ok":    "plain text: ok",
		"a 100% ü\n":        "a 100%25 %C3%BC%0A",
		"tab\tand \x7f end": "tab%09and %7F end",
		"":                  "",
	} {
		if got := GRPCMessage(in); got != want {
			t.Errorf("GRPCMessage(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzGRPCMessage: every encoded message is printable ASCII and decodes
// back to the original (the gRPC spec's percent-decoding).
func FuzzGRPCMessage(f *testing.F) {
	f.Add("a 100% ü\n")
	f.Add("%%25")
	f.Fuzz(func(t *testing.T, s string) {
		e := GRPCMessage(s)
		for i := 0; i < len(e); i++ {
			if e[i] < 0x20 || e[i] > 0x7e {
				t.Fatalf("GRPCMessage(%q) = %q has byte %#x", s, e, e[i])
			}
		}
		if d, err := url.PathUnescape(e); err != nil || d != s {
			t.Fatalf("GRPCMessage(%q) = %q decodes to %q, %v", s, e, d, err)
		}
	})
}

func TestRetryHints(t *testing.T) {
	for d, want := range map[time.Duration][2]string{
		time.Second:             {"1", "1000"},
		1500 * time.Millisecond: {"2", "1500"},
		0:                       {"1", "0"},
	} {
		if ra, pb := RetryAfter(d), Pushback(d); ra != want[0] || pb != want[1] {
			t.Errorf("%v: Retry-After %s, pushback %s; want %s, %s", d, ra, pb, want[0], want[1])
		}
	}
}
