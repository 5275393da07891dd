package envoy

import (
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/envoyproxy/envoy/contrib/golang/common/go/api"

	"github.com/llmesh/llmesh/filter/relocate"
	"github.com/llmesh/llmesh/scheduler"
)

// gRPC status codes used in local replies.
const (
	grpcUnknown           = 2
	grpcResourceExhausted = 8
	grpcInternal          = 13
	grpcUnavailable       = 14
	// noGRPCStatus lets Envoy derive the gRPC status from the HTTP code
	// (Grpc::Status::WellKnownGrpcStatus::InvalidCode).
	noGRPCStatus = -1
)

// localReply is a reply the filter sends instead of the upstream's.
type localReply struct {
	http      int
	grpc      int64
	body      string
	details   string // Envoy response code details: no spaces
	retryable bool
}

func fmtErr(class, cause error) error { return fmt.Errorf("%w: %w", class, cause) }

// replyFor maps a scheduler or relocation error to the reply a client
// sees. Retryable ones carry Retry-After (HTTP) or
// grpc-retry-pushback-ms (gRPC) in send.
func replyFor(err error) localReply {
	switch {
	case errors.Is(err, scheduler.ErrPreempted):
		return localReply{http: 503, grpc: grpcUnavailable, body: "preempted by higher-priority work; retry", details: "llmesh_preempted", retryable: true}
	case errors.Is(err, scheduler.ErrQueueFull):
		return localReply{http: 429, grpc: grpcResourceExhausted, body: "queue full; retry later", details: "llmesh_queue_full", retryable: true}
	case errors.Is(err, scheduler.ErrUnavailable), errors.Is(err, scheduler.ErrClosed):
		return localReply{http: 503, grpc: grpcUnavailable, body: "scheduler unavailable", details: "llmesh_scheduler_unavailable", retryable: true}
	case errors.Is(err, scheduler.ErrCancelled):
		return localReply{http: 499, grpc: 1, body: "cancelled while queued", details: "llmesh_cancelled"}
	case errors.Is(err, scheduler.ErrRejected):
		return localReply{http: 503, grpc: grpcUnavailable, body: "rejected by the scheduler: " + err.Error(), details: "llmesh_rejected", retryable: true}
	case errors.Is(err, relocate.ErrTooLarge), errors.Is(err, relocate.ErrCompressed),
		errors.Is(err, relocate.ErrEncoding), errors.Is(err, relocate.ErrInvalidValue),
		errors.Is(err, relocate.ErrMalformed):
		h, g := relocate.Status(err)
		return localReply{http: h, grpc: int64(g), body: err.Error(), details: "llmesh_relocation"}
	}
	return localReply{http: 500, grpc: grpcInternal, body: "internal error", details: "llmesh_internal"}
}

// reply sends r on cb and returns api.LocalReply. gRPC requests always get
// a real gRPC status: Envoy uses the status given verbatim.
func (f *streamFilter) reply(cb api.FilterProcessCallbacks, r localReply) api.StatusType {
	hdrs := map[string][]string{}
	grpc := int64(noGRPCStatus)
	if f.grpc {
		grpc = r.grpc
		if grpc == 0 {
			grpc = grpcUnknown
		}
	}
	if r.retryable {
		ra := f.cfg.RetryAfter
		if f.grpc {
			hdrs["grpc-retry-pushback-ms"] = []string{strconv.FormatInt(ra.Milliseconds(), 10)}
		} else {
			hdrs["retry-after"] = []string{strconv.Itoa(int((ra + time.Second - 1) / time.Second))}
		}
	}
	hdrs["x-llmesh-reply"] = []string{r.details}
	cb.SendLocalReply(r.http, r.body+"\n", hdrs, grpc, r.details)
	return api.LocalReply
}

// recoverCallback turns a panic in a synchronous callback into a local
// reply with a real gRPC status for gRPC requests (the SDK's own recovery
// answers 500 with grpc-status 0, which gRPC clients read as success). It
// must be deferred directly.
func (f *streamFilter) recoverCallback(cb api.FilterProcessCallbacks, status *api.StatusType) {
	e := recover()
	if e == nil {
		return
	}
	f.m.panics.Increment(1)
	api.LogErrorf("llmesh: panic in filter callback: %v\n%s", e, debug.Stack())
	f.finishOnPanic()
	*status = f.reply(cb, localReply{http: 500, grpc: grpcInternal, body: "internal error in llmesh filter", details: "llmesh_panic"})
}

// finishOnPanic releases what the request holds, itself guarded against
// a second panic (a broken observer, for example).
func (f *streamFilter) finishOnPanic() {
	defer func() { _ = recover() }()
	if f.obs != nil && !f.finished {
		f.finished = true
		f.release(scheduler.Failed)
	}
}
