package scheduler

import (
	"context"
	"errors"
	"time"

	"github.com/llmesh/llmesh/kvblock"
)

// This file is the contract between the scheduler and its hosts (the
// embedded gateway, the Envoy adapter, the shared scheduling service and its
// client). Hosts classify a request, then call Admit; everything else about
// ordering, batching windows and preemption stays behind these types.

// Request asks for admission of one request into a pool.
type Request struct {
	// ID identifies the request for logs, preemption counting and the shared
	// service; hosts make it unique per request (a retry after preemption
	// keeps the same ID).
	ID string
	// Pool is the upstream the request goes to; empty means the default pool.
	Pool string
	// Class is the class name the host resolved from trusted configuration;
	// an unknown name is scheduled as the default class.
	Class string
	// PromptTokens and MaxTokens size the request for token-based capacity and
	// for TTFT predictions; zero means unknown.
	PromptTokens int
	MaxTokens    int
	// Arrival is when the host received the request; zero means now. Queue
	// deadlines (max wait, TTFT SLO) count from it, also across requeues.
	Arrival time.Time
	// Requeue marks a request that was preempted before it sent anything and
	// now waits again: it goes to the front of its class.
	Requeue bool
	// Affinity, when set, keeps requests with the same key on the same
	// endpoint of the pool while it has room (a session or prompt-prefix
	// hash, so a conversation stays where its KV cache is); empty means the
	// least loaded endpoint (endpoint.go).
	Affinity string
	// Blocks are the prompt's KV block hashes (kvblock.Chain, first block
	// first). In a pool with PrefixRouting the picker prefers an endpoint
	// it sent the same leading blocks to before (endpoint.go); only the
	// first MaxBlocks count. Nil, or a pool without PrefixRouting: the
	// picker ignores them. The machine keeps the slice while the request
	// waits; the caller must not change it.
	Blocks []kvblock.Hash
	// Avoid names an endpoint the request just failed on (a host's retry
	// after a failure before any byte reached its client): the picker
	// chooses it only when every other endpoint is drained or ejected.
	// Empty means none. The shared service's wire does not carry it: a
	// retry through the service relies on ejection alone (eject.go).
	Avoid string
	// Pin names the endpoint the request must go to: a pick made upstream
	// of the host by another endpoint picker, which the host honours
	// (pools' accept_upstream_pick). The request is admitted only there,
	// when that endpoint has room and is not drained or ejected, and counts
	// against its limit; until then it waits at the head of its class (a
	// pinned head blocks the requests behind it, as any head that does not
	// fit does), and preemption for it takes victims on that endpoint only.
	// An endpoint the pool does not have is rejected at arrival. Empty
	// means none. The shared service's wire does not carry it.
	Pin string
}

// MaxBlocks is how many of a request's leading Blocks the picker looks at
// (at 16 tokens a block, a 131072-token prompt); the shared service rejects
// a Start that carries more.
const MaxBlocks = 8192

// Progress is what a host reports about an admitted request as its stream
// goes on; victim selection and TTFT predictions use it.
type Progress struct {
	// FirstToken is true once the first output token reached the host.
	FirstToken bool
	// Tokens is the number of output tokens generated so far.
	Tokens int
}

// Outcome is how an admission ended.
type Outcome int

const (
	// Done: the response finished normally.
	Done Outcome = iota
	// Failed: the upstream failed (error status, reset, stall).
	Failed
	// Cancelled: the client went away.
	Cancelled
	// Preempted: the host stopped the request because the lease asked it to.
	Preempted
	// Unreachable: the host could not connect to the lease's endpoint, so
	// nothing was sent; the picker leaves that endpoint out for a while
	// (eject.go) and the host may admit the request again.
	Unreachable
)

func (o Outcome) String() string {
	switch o {
	case Done:
		return "done"
	case Failed:
		return "failed"
	case Cancelled:
		return "cancelled"
	case Preempted:
		return "preempted"
	case Unreachable:
		return "unreachable"
	}
	return "unknown"
}

// Lease is one admission. Every lease is released exactly once; extra
// Release calls are ignored, so hosts can release from every exit path.
type Lease interface {
	// Preempt is closed when the scheduler wants this request stopped to make
	// room for higher-priority work. The host stops it at its next chance and
	// calls Release(Preempted). It is never closed for non-preemptible work.
	Preempt() <-chan struct{}
	// Progress reports stream progress; cheap enough to call per chunk.
	Progress(p Progress)
	// Release ends the admission and frees its capacity.
	Release(o Outcome)
	// QueueTime is how long the request waited before admission.
	QueueTime() time.Duration
}

// PreemptNotifier is implemented by leases that can call a function when
// they are preempted, for a host that watches many leases without a
// goroutine per lease (the shared service).
type PreemptNotifier interface {
	// OnPreempt has f called once, when Preempt's channel closes (at once
	// if it is closed already). f runs with the scheduler's lock held: it
	// must not block or call into the scheduler.
	OnPreempt(f func())
}

// Routed is implemented by leases bound to one endpoint of their pool.
type Routed interface {
	// Endpoint is the endpoint's name (its host:port), or "" when the pool
	// has one unnamed endpoint: the host's configured upstream.
	Endpoint() string
}

// EndpointOf returns the endpoint a lease is bound to; "" (the host's
// configured upstream) for a lease that is not Routed.
func EndpointOf(l Lease) string {
	if r, ok := l.(Routed); ok {
		return r.Endpoint()
	}
	return ""
}

// Admitter is what hosts call. Implemented by the in-process scheduler and by
// the shared service's client.
type Admitter interface {
	// Admit blocks until req is admitted, rejected, or ctx ends. On ctx's end
	// the request leaves the queue and the error wraps ErrCancelled and
	// ctx.Err(). Errors wrap one of the sentinels below.
	Admit(ctx context.Context, req Request) (Lease, error)
}

// Error classes. Callers branch with errors.Is; each wraps its cause.
var (
	// ErrQueueFull: the class's queue is at its limit.
	ErrQueueFull = errors.New("scheduler: queue full")
	// ErrRejected: the request cannot be admitted (for example it can never
	// fit the pool, or the class's max wait passed).
	ErrRejected = errors.New("scheduler: rejected")
	// ErrPreempted: the request was preempted and may not be retried here.
	ErrPreempted = errors.New("scheduler: preempted")
	// ErrCancelled: the caller's context ended while queued.
	ErrCancelled = errors.New("scheduler: cancelled")
	// ErrUnavailable: a shared scheduler could not be reached and the host is
	// configured to fail closed.
	ErrUnavailable = errors.New("scheduler: unavailable")
	// ErrClosed: the scheduler was shut down.
	ErrClosed = errors.New("scheduler: closed")
)
