package gateway

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/llmesh/llmesh/exchange"
	"google.golang.org/grpc/codes"
)

// framing is how a response body is cut into units that the client must
// never see split by a gateway-made ending (an error event, a spliced
// continuation, error trailers).
type framing uint8

const (
	framingRaw framing = iota
	framingSSE
	framingGRPC
	// framingGRPCWeb is binary gRPC-Web: gRPC's frames, with the status
	// in a last frame (flag 0x80) instead of HTTP trailers.
	framingGRPCWeb
)

func framingOf(res *http.Response) framing {
	ct := res.Header.Get("Content-Type")
	switch exchange.GRPCKindOf(ct) {
	case exchange.GRPC:
		return framingGRPC
	case exchange.GRPCWeb:
		return framingGRPCWeb
	case exchange.GRPCWebText:
		return framingRaw // base64: no frame boundaries to keep
	}
	if mt, _, _ := mime.ParseMediaType(ct); mt == "text/event-stream" {
		return framingSSE
	}
	return framingRaw
}

// stream is the response body ReverseProxy copies to the client. It reads
// the upstream body straight into the proxy's buffer (no extra copy on the
// common path), feeds every emitted chunk to the observer with its arrival
// time, holds back a trailing partial SSE event or gRPC frame, and turns an
// upstream failure into a clean protocol-level ending. Only the handler
// goroutine uses it.
type stream struct {
	x       *clientExchange
	a       *attempt
	base    http.RoundTripper
	outreq  *http.Request
	res     *http.Response // current upstream response
	out     *http.Response // what ReverseProxy sees
	framing framing

	t0       time.Time // response headers; see now
	first    []byte    // primed bytes not yet emitted
	firstAt  time.Time
	primeBuf *[]byte // backs first; back to primeBuffers once emitted
	carry    []byte  // held partial unit
	pending  []byte  // gateway-made bytes to emit next
	upErr    error   // upstream read error to act on after emitting
	// frameLeft counts bytes of a gRPC frame that passed unaligned.
	frameLeft int
	// atBoundary: everything emitted so far ends at a unit boundary.
	atBoundary bool
	done       bool
	doneErr    error
	closed     bool
	// sent counts upstream body bytes handed to the client (raw framing:
	// with a Content-Length it tells a delivered body from a cut one).
	sent int64

	splice *splicer
	// migrated: the stream was continued on another endpoint after a cut
	// (migrate.go); cutErr is that cut.
	migrated bool
	cutErr   error
	// holding: resume off and a byte was sent; the attempt ignores
	// preemption from then on.
	holding bool
}

func newStream(x *clientExchange, a *attempt, base http.RoundTripper, outreq *http.Request, res *http.Response) *stream {
	s := &stream{x: x, a: a, base: base, outreq: outreq, res: res, framing: framingOf(res), atBoundary: true}
	out := *res
	out.Body = s
	out.Trailer = http.Header{}
	for k, v := range res.Trailer {
		out.Trailer[k] = v
	}
	s.out = &out
	// A continuation serves a preemptible request's preemption and any
	// request's migration (migrate.go), which needs several endpoints.
	if v := x.core.View(); v.Lease != nil && (x.preemptible || len(x.pool.endpoints) > 1) && v.Meta.Spliceable &&
		s.framing == framingSSE && res.StatusCode == http.StatusOK && x.pool.Resume == ResumeContinue {
		s.splice = newSplicer(v.Meta.API)
	}
	s.t0 = x.g.clock.Now()
	x.core.ResponseHead(s.t0, res.StatusCode, res.Header)
	return s
}

// now is the clock's time, read as the time elapsed since the response
// headers: a real clock then reads only its monotonic counter (one clock
// read per chunk instead of two), and the result is the same instant on
// the timeline every duration is measured on. Its wall-clock part follows
// the response headers' reading rather than a wall clock stepped since.
func (s *stream) now() time.Time { return s.t0.Add(s.x.g.clock.Since(s.t0)) }

func (s *stream) response() *http.Response { return s.out }

// primeBytes sizes the first read; first chunks are small (headers of a
// stream, one event, one frame).
const primeBytes = 4 << 10

// prime reads the first body bytes. It fails only when the attempt was
// preempted before any byte arrived, so the caller can requeue; any other
// error is kept for Read to turn into a proper ending.
func (s *stream) prime() error {
	bp := primeBuffers.Get().(*[]byte)
	s.primeBuf = bp
	buf := *bp
	n, err := s.res.Body.Read(buf)
	for n == 0 && err == nil {
		n, err = s.res.Body.Read(buf)
	}
	s.firstAt = s.now()
	s.first = buf[:n]
	if n > 0 {
		s.a.touch(s.firstAt)
	}
	if err != nil {
		if n == 0 && errors.Is(s.a.cause(), errPreemptSignal) {
			return err
		}
		s.upErr = err
	}
	return nil
}

var primeBuffers = sync.Pool{New: func() any { b := make([]byte, primeBytes); return &b }}

// releasePrime returns the first-read buffer to its pool.
func (s *stream) releasePrime() {
	if s.primeBuf != nil {
		s.first = nil
		primeBuffers.Put(s.primeBuf)
		s.primeBuf = nil
	}
}

// Read implements io.Reader for ReverseProxy's copy loop.
func (s *stream) Read(p []byte) (int, error) {
	for {
		if len(s.pending) > 0 {
			n := copy(p, s.pending)
			s.pending = s.pending[n:]
			return n, nil
		}
		if s.done {
			return 0, s.doneErr
		}
		if s.upErr != nil && len(s.first) == 0 {
			err := s.upErr
			s.upErr = nil
			s.carry = s.carry[:0] // a partial unit the upstream never finished
			s.end(err)
			continue
		}
		n, err := s.fill(p)
		if err != nil {
			s.upErr = err
		}
		if n > 0 {
			return n, nil
		}
	}
}

// fill reads upstream bytes behind any carried partial unit into p and
// returns how many of them may go to the client now.
func (s *stream) fill(p []byte) (int, error) {
	k := 0
	if len(s.carry) > 0 {
		k = copy(p, s.carry)
		if k < len(s.carry) { // a unit larger than the copy buffer passes unaligned
			s.carry = s.carry[k:]
			s.emitted(p[:k], s.now(), false)
			return k, nil
		}
		s.carry = s.carry[:0]
	}
	var n int
	var err error
	at := s.firstAt
	if len(s.first) > 0 {
		n = copy(p[k:], s.first)
		s.first = s.first[n:]
		err = s.upErr
		if len(s.first) > 0 {
			err = nil
		} else {
			s.upErr = nil
			s.releasePrime()
		}
	} else {
		n, err = s.res.Body.Read(p[k:])
		at = s.now()
		if n > 0 {
			s.a.touch(at)
		}
	}
	total := k + n
	cut := s.cut(p[:total], err == io.EOF)
	if cut < total {
		s.carry = append(s.carry, p[cut:total]...)
	}
	if cut == 0 && total == len(p) && len(p) > 0 { // no boundary in a full buffer
		s.carry = s.carry[:0]
		cut = total
		if s.framing.grpc() && total >= 5 {
			// A frame larger than the buffer passes unaligned; remember
			// how much of it is still to come.
			s.frameLeft = 5 + int(binary.BigEndian.Uint32(p[1:5])) - total
		}
		s.emitted(p[:cut], at, false)
		return cut, err
	}
	if cut > 0 {
		if s.splice != nil && s.splice.rewriting {
			out, rerr := s.splice.rewrite(p[:cut])
			if rerr != nil {
				if s.migrated {
					rerr = s.migrationErr(rerr)
				}
				s.terminate(rerr, exchange.EndFailed)
				return 0, nil
			}
			s.pending = append(s.pending[:0], out...)
			if len(s.pending) > 0 {
				s.emitted(s.pending, at, true)
			}
			return 0, err
		}
		s.emitted(p[:cut], at, true)
	}
	return cut, err
}

// emitted observes bytes on their way to the client.
func (s *stream) emitted(b []byte, at time.Time, aligned bool) {
	s.atBoundary = aligned
	s.sent += int64(len(b))
	if !s.holding && len(b) > 0 && s.x.pool.Resume == ResumeOff {
		s.holding = true
		s.a.holdOn.Store(true)
	}
	if s.splice != nil && !s.splice.rewriting {
		if aligned {
			s.splice.track(b)
		} else {
			s.splice = nil // cannot follow an event split by the buffer; no continuation
		}
	}
	_ = s.x.core.Chunk(at, b) // parse errors are recorded in the observation
}

// cut returns the length of the longest prefix of b that ends at a unit
// boundary; at EOF everything goes.
func (s *stream) cut(b []byte, eof bool) int {
	if eof {
		return len(b)
	}
	switch s.framing {
	case framingSSE:
		return lastEventEnd(b)
	case framingGRPC, framingGRPCWeb:
		return s.grpcCut(b)
	}
	return len(b)
}

// lastEventEnd is the index just after the last blank line ("\n\n" or
// "\n\r\n") in b, 0 when there is none.
func lastEventEnd(b []byte) int {
	for i := len(b) - 1; i >= 1; i-- {
		if b[i] != '\n' {
			continue
		}
		if b[i-1] == '\n' || (b[i-1] == '\r' && i >= 2 && b[i-2] == '\n') {
			return i + 1
		}
	}
	return 0
}

// grpcCut is the length of the whole gRPC frames at the start of b, after
// the tail of a frame that passed unaligned earlier.
func (s *stream) grpcCut(b []byte) int {
	i := 0
	if s.frameLeft > 0 {
		if len(b) <= s.frameLeft {
			s.frameLeft -= len(b)
			return len(b)
		}
		i = s.frameLeft
		s.frameLeft = 0
	}
	for i+5 <= len(b) {
		l := int(binary.BigEndian.Uint32(b[i+1 : i+5]))
		if l > len(b)-i-5 {
			break
		}
		i += 5 + l
	}
	return i
}

// end acts on the upstream body's final read error.
func (s *stream) end(err error) {
	if s.splice != nil && s.splice.checking {
		// The continuation ended before the check could see enough text:
		// judge what it sent.
		out, rerr := s.splice.settle()
		if rerr != nil {
			if s.migrated {
				rerr = s.migrationErr(rerr)
			}
			s.terminate(rerr, exchange.EndFailed)
			return
		}
		if len(out) > 0 {
			s.pending = append(s.pending, out...)
			s.emitted(out, s.now(), true)
		}
	}
	if err == io.EOF {
		s.finishOK()
		return
	}
	if s.delivered() {
		// The client already has the whole response: clients close
		// right after [DONE], and that close (or a late preemption, stall
		// or reset) may reach the gateway before the upstream's own end.
		s.finishDelivered()
		return
	}
	cause := s.a.cause()
	switch {
	case errors.Is(cause, errPreemptSignal) && s.outreq.Context().Err() == nil:
		if s.splice != nil {
			if cerr := s.continueStream(exchange.EndPreempted, ""); cerr == nil {
				return
			} else {
				s.terminate(cerr, exchange.EndFailed)
				return
			}
		}
		s.terminate(ErrPreemptedMidStream, exchange.EndPreempted)
	case errors.Is(cause, ErrUpstreamStalled):
		s.terminate(fmt.Errorf("%w: nothing for %v", ErrUpstreamStalled, s.a.idleD), exchange.EndFailed)
	case s.outreq.Context().Err() != nil:
		s.x.core.Finish(s.x.g.clock.Now(), exchange.EndClientGone, s.outreq.Context().Err())
		s.done, s.doneErr = true, err
	case s.canMigrate(err):
		if merr := s.migrate(err); merr != nil {
			s.terminate(merr, exchange.EndFailed)
		}
	default:
		s.terminate(fmt.Errorf("%w: %v", ErrUpstreamReset, err), exchange.EndFailed)
	}
}

// finishOK ends a response the upstream completed.
func (s *stream) finishOK() {
	s.done, s.doneErr = true, io.EOF
	for k, v := range s.res.Trailer {
		s.out.Trailer[k] = v
	}
	if s.res.Trailer != nil {
		s.x.core.Trailers(s.x.g.clock.Now(), s.res.Trailer)
	}
	// The outcome follows the observation (exchange.OutcomeOf), as the Envoy
	// host's: an error status, a gRPC status other than OK (in trailers, a
	// trailers-only response or gRPC-Web's trailer frame) or a truncated
	// stream fail it.
	s.serverTiming()
}

// delivered reports whether the protocol's terminal unit already went to
// the client: [DONE] for SSE, the whole declared Content-Length for other
// bodies. gRPC is never delivered before the upstream's end, since its
// status travels in the trailers that follow it.
func (s *stream) delivered() bool {
	switch s.framing {
	case framingSSE:
		return s.x.core.View().Observation().Complete
	case framingRaw:
		return s.res.ContentLength > 0 && s.sent >= s.res.ContentLength
	}
	return false
}

// finishDelivered ends a response the client received completely although
// the upstream body did not end cleanly: the outcome stays Done, and the
// upstream's missing trailers are not waited for.
func (s *stream) finishDelivered() {
	s.done, s.doneErr = true, io.EOF
	s.serverTiming()
}

func (f framing) grpc() bool { return f == framingGRPC || f == framingGRPCWeb }

// appendWebTrailer appends a gRPC-Web trailer frame carrying code and msg
// (percent-encoded as grpc-message is).
func appendWebTrailer(dst []byte, code int, msg string) []byte {
	payload := "grpc-status: " + strconv.Itoa(code) + "\r\ngrpc-message: " + exchange.GRPCMessage(msg) + "\r\n"
	var pre [5]byte
	pre[0] = 0x80
	binary.BigEndian.PutUint32(pre[1:], uint32(len(payload)))
	return append(append(dst, pre[:]...), payload...)
}

// terminate ends the client's response with a protocol-level error: an
// OpenAI error event for SSE, grpc-status UNAVAILABLE in the trailers for
// gRPC; other bodies are cut off (the connection is aborted). how is the
// ending the core records (EndFailed, or EndPreempted).
func (s *stream) terminate(err error, how exchange.Ending) {
	s.x.core.Finish(s.x.g.clock.Now(), how, err)
	s.done = true
	switch s.framing {
	case framingSSE:
		if !s.atBoundary {
			s.pending = append(s.pending, '\n', '\n')
		}
		s.pending = append(s.pending, "event: error\ndata: "...)
		s.pending = append(s.pending, exchange.AppendOpenAIError(nil, http.StatusBadGateway, errorType(err), err.Error())...)
		s.pending = append(s.pending, '\n', '\n')
		s.doneErr = io.EOF
	case framingGRPC:
		s.out.Trailer.Set("Grpc-Status", strconv.Itoa(int(codes.Unavailable)))
		s.out.Trailer.Set("Grpc-Message", exchange.GRPCMessage(err.Error()))
		s.doneErr = io.EOF
	case framingGRPCWeb:
		if !s.atBoundary {
			s.doneErr = err // inside a frame: only cutting the body off is clean
			break
		}
		s.pending = appendWebTrailer(s.pending, int(codes.Unavailable), err.Error())
		s.doneErr = io.EOF
	default:
		s.doneErr = err
	}
	s.serverTiming()
}

func errorType(err error) string {
	switch {
	case errors.Is(err, ErrUpstreamStalled):
		return "upstream_timeout"
	case errors.Is(err, ErrPreemptedMidStream):
		return "preempted"
	}
	return "upstream_error"
}

func (s *stream) serverTiming() {
	if s.x.rt.cfg.ServerTiming {
		s.out.Trailer.Set("Server-Timing", s.x.core.ServerTiming(s.x.g.clock.Now(), true))
	}
}

// Close stops the attempt; ReverseProxy calls it once the copy is over.
func (s *stream) Close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	s.releasePrime()
	err := s.res.Body.Close()
	s.a.stop()
	return err
}
