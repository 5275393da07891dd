package envoyfilter

import (
	"fmt"
	"runtime/debug"

	"github.com/envoyproxy/envoy/contrib/golang/common/go/api"

	"github.com/llmesh/llmesh/exchange"
)

func fmtErr(class, cause error) error { return fmt.Errorf("%w: %w", class, cause) }

// errPanic is the cause of the reply to a panic in the filter.
var errPanic = fmt.Errorf("%w in llmesh filter", exchange.ErrInternal)

// panicReply is the reply to a panic in the filter.
func panicReply() exchange.Reply {
	r := exchange.ReplyFor(errPanic)
	r.Details = "llmesh_panic"
	return r
}

// reply sends r on cb and returns api.LocalReply: the core's error table
// (exchange.ReplyFor) gives the status, the gRPC code and the body. HTTP
// clients get the OpenAI error object; gRPC clients the message, which
// Envoy sends percent-encoded as grpc-message (with the gRPC status given
// verbatim: gRPC requests always get a real one). Retryable replies carry
// Retry-After (HTTP) or grpc-retry-pushback-ms (gRPC).
func (f *streamFilter) reply(cb api.FilterProcessCallbacks, r exchange.Reply) api.StatusType {
	hdrs := map[string][]string{}
	grpc := int64(r.GRPCCode)
	body := r.Message
	if !f.grpc {
		// noGRPCStatus: Envoy derives none for a request that is not gRPC.
		grpc = -1
		body = string(r.OpenAIBody())
		hdrs["content-type"] = []string{"application/json"}
	}
	if r.Retryable {
		ra := f.cfg.RetryAfter
		if f.grpc {
			hdrs["grpc-retry-pushback-ms"] = []string{exchange.Pushback(ra)}
		} else {
			hdrs["retry-after"] = []string{exchange.RetryAfter(ra)}
		}
	}
	hdrs["x-llmesh-reply"] = []string{r.Details}
	// Before the reply: Envoy may run it through EncodeHeaders at once.
	f.replied.Store(true)
	cb.SendLocalReply(r.HTTPStatus, body, hdrs, grpc, r.Details)
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
	*status = f.reply(cb, panicReply())
}

// finishOnPanic releases what the request holds, itself guarded against
// a second panic (a broken observer, for example).
func (f *streamFilter) finishOnPanic() {
	defer func() { _ = recover() }()
	if f.responding() {
		f.noteAdmitted()
		f.x.Finish(f.clk.Now(), exchange.EndFault, nil)
	}
}
