// Package server serves a scheduler.Admitter (normally one in-process
// scheduler.Scheduler) over gRPC as llmesh.scheduler.v1.Scheduler, so that
// several proxies share one pool capacity.
//
// A proxy holds one Session stream and multiplexes its admissions over it,
// each named by a lease id the proxy chose; a message carries the messages
// of several leases, so a busy proxy sends and receives few, large
// messages. Concurrency of a session: the handler's goroutine alone
// receives and dispatches (Start, Progress, Done). A Start the scheduler
// decides in the step of its arrival (free capacity: the usual case) is
// admitted there, in that goroutine (pools.Set.AdmitNow,
// scheduler.Scheduler.Queue), and the answers decided while handling one
// received message are sent together right after it; a Start that has to
// wait gets a goroutine until its answer. A lease's preemption is queued
// by a callback of the lease (scheduler.PreemptNotifier), run by whichever
// goroutine stepped the scheduler, and sent by the session's sender
// goroutine. Whichever goroutine finds the send lock free sends everything
// queued, in one message, until the queue is empty; the others only queue
// (flat combining). The handler releases the leases the proxy says Done
// for. The session's mu guards its lease table and the send queue. When
// the stream ends, the handler ends every lease it still holds (Cancelled:
// it releases the admitted ones; a request still waiting leaves its queue),
// waits for the session's goroutines, and returns.
//
// The older protocol, one Admit stream per admission, is still served.
// Concurrency: gRPC runs each stream's handler in its own goroutine; that
// goroutine alone sends on the stream. It starts one receiving goroutine per admitted stream, which
// alone receives, forwards progress to the lease, and ends with one message
// on a buffered channel when the client says Done or the stream breaks. The
// handler then releases the lease (Cancelled when the stream broke) and
// returns, which ends the stream; so every admission is released exactly
// once, and a proxy that dies frees its slots.
//
// With an identities file (Server.SetIdentities, package identity) a
// session is resolved to an identity when it opens, from its bearer token
// or its verified certificate; the counts of what an identity holds
// (sessions, leases, queued requests) are atomics shared by all its
// sessions, changed under each session's mu as its leases start, are
// decided and end. A reload (Server.ReplaceIdentities, from the reloading
// goroutine) first marks every session it revokes (an admission decided
// for a marked session is released, not answered), then ends each: it
// rejects the waiting requests and releases the leases itself, and makes
// the stream end at once. A framed session's receive is interrupted; a
// gRPC receive cannot be, so a gRPC session with an identity receives in
// a goroutine of its own, which ends the session when the stream ends,
// while the handler goroutine waits for that or the revocation and, on a
// revocation, returns its status at once (after which nothing sends), so
// that gRPC ends the stream and the pending receive fails. An Admit
// stream's handler returns the same way, its receiving goroutine ending
// with the stream.
//
// The pools it serves are a scheduler/pools set (MeshScheduler). A
// Service's Serve owns the gRPC server's and the framed mux's goroutines
// and waits for them; the capacity watchers it starts are the set's, and
// Close waits for them. Reload and ReplaceIdentities are called from the
// command's goroutines (its file watchers and SIGHUP, cmd/llmesh/schedserve):
// the set and the identities serialise them.
package server
