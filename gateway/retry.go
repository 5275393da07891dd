package gateway

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"

	"github.com/llmesh/llmesh/exchange"
	"github.com/llmesh/llmesh/scheduler"
)

// Retry on another replica: an upstream attempt that failed before any
// response byte reached the client (the connection failed, the engine
// answered 502, 503 or 504, or it closed the stream before its first body
// byte) is sent once more, on a new admission. The failed attempt's lease
// is released with the outcome that tells the scheduler's picker about the
// endpoint (scheduler.Unreachable for a connection that failed, which
// ejects the endpoint at once; scheduler.Failed otherwise, which ejects it
// after a burst: scheduler/eject.go), so the new admission goes to another
// endpoint whenever the pool has one to offer. A request is retried only
// in a pool with several endpoints and a scheduler to choose among them,
// only while its client waits, and only once: a second failure is the
// client's answer (502 upstream unavailable). A stream that failed after
// its first byte reached the client is not retried here (resume
// continues it when the pool allows: splice.go).

// retryStatus reports whether an upstream status, before any body byte,
// is worth one more try elsewhere: the gateway-class failures of an engine
// replica that is going away or overloaded. 500 is the engine's answer to
// this request and is passed on.
func retryStatus(code int) bool {
	return code == http.StatusBadGateway || code == http.StatusServiceUnavailable || code == http.StatusGatewayTimeout
}

// unreachable reports whether err is a failed connection: nothing was sent.
func unreachable(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// emptyCut reports whether a first body read that returned no byte ended
// in an error other than a clean end of the body: the engine went away
// before it produced anything.
func emptyCut(s *stream) bool {
	return len(s.first) == 0 && s.upErr != nil && s.upErr != io.EOF
}

// canRetry reports whether x may send its request once more after a
// failure before any byte reached the client.
func (x *clientExchange) canRetry(ctx context.Context) bool {
	return !x.retried && ctx.Err() == nil && x.g.admitter != nil && x.core.View().Lease != nil && len(x.pool.endpoints) > 1
}

// retryElsewhere gives the current lease back as the attempt ended (how:
// exchange.EndFailed or exchange.EndUnreachable) and admits the request again
// away from that endpoint; the next attempt goes to the new lease's
// endpoint. The error is the admission's (the client's answer then).
func (x *clientExchange) retryElsewhere(ctx context.Context, how exchange.Ending) error {
	x.retried = true
	x.g.retries.Add(1)
	v := x.core.View()
	x.core.Requeued(how)
	req := v.Request
	req.Avoid = scheduler.EndpointOf(v.Lease)
	lease, err := x.g.admitter.Admit(ctx, req)
	if err != nil {
		return err
	}
	x.core.Admitted(x.g.clock.Now(), lease)
	return nil
}
