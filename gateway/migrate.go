package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/llmesh/llmesh/exchange"
	"github.com/llmesh/llmesh/scheduler"
)

// Migration: an OpenAI SSE stream whose upstream connection failed after
// bytes went to the client (a reset, or the connection closing before the
// body's end: the engine died) is continued on another endpoint by the
// machinery that continues a preempted stream (splice.go): the prompt plus
// the text already streamed, the remaining max_tokens, the continuation's
// events rewritten into the client's stream, and the restart check, so the
// client sees one stream with no text lost or repeated. The cut attempt's
// lease goes back as failed (scheduler.Failed, which counts toward the
// endpoint's failure burst: scheduler/eject.go) and the continuation is
// admitted at the front of its class away from that endpoint; a
// continuation whose connection is refused there is admitted once more
// elsewhere, and the refusal ejects the endpoint at once.
//
// A stream migrates at most once: a second cut, a continuation that fails
// or restarts the answer, or a stream that cannot migrate ends with the
// retryable error a preemption without continuation gives (an OpenAI error
// event of type upstream_error; grpc-status UNAVAILABLE for gRPC). A stream
// can migrate when its pool resumes with continue, has several endpoints
// and a scheduler, and its API is one the splicer continues (OpenAI chat
// and completions over SSE). A clean end of the body (io.EOF) is the
// engine's answer, not a cut, and is not migrated.

// canMigrate reports whether the stream may be continued elsewhere after
// its upstream failed with err.
func (s *stream) canMigrate(err error) bool {
	x := s.x
	return s.splice != nil && !s.migrated && err != nil && !errors.Is(err, io.EOF) &&
		s.outreq.Context().Err() == nil && x.g.admitter != nil && x.core.View().Lease != nil &&
		len(x.pool.endpoints) > 1
}

// migrate continues the stream on another endpoint after its upstream
// failed with cut.
func (s *stream) migrate(cut error) error {
	s.migrated = true
	s.cutErr = cut
	s.x.g.migrations.Add(1)
	dead := scheduler.EndpointOf(s.x.core.View().Lease)
	if err := s.continueStream(exchange.EndFailed, dead); err != nil {
		return s.migrationErr(err)
	}
	return nil
}

// migrationErr is the client's error for a migration that failed: an
// upstream reset (retryable), naming the cut and why its continuation
// failed.
func (s *stream) migrationErr(err error) error {
	if errors.Is(err, ErrContinuationRestarted) {
		err = errors.New("the engine restarted the answer instead of continuing it")
	}
	return fmt.Errorf("%w: %v; migration failed: %v", ErrUpstreamReset, s.cutErr, err)
}

// admitContinuation admits the request again at the front of its class
// after x.core.Requeued released the last lease, away from avoid when it
// names an endpoint.
func (x *clientExchange) admitContinuation(ctx context.Context, avoid string) error {
	if x.g.admitter == nil {
		return nil
	}
	req := x.core.View().Request
	req.Requeue = true
	req.Avoid = avoid
	lease, err := x.g.admitter.Admit(ctx, req)
	if err != nil {
		return err
	}
	x.core.Admitted(x.g.clock.Now(), lease)
	return nil
}
