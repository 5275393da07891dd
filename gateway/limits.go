package gateway

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llmesh/llmesh/exchange"
	"github.com/llmesh/llmesh/scheduler"
)

// Bounded resources toward clients. A client that holds the gateway's
// memory or slots without making progress is cut off by one of these:
//
//   - BodyTimeout: the whole request body must arrive within it (a slow
//     body holds its buffer and no slot, but the buffer counts);
//   - BodyBudget: the request bodies buffered at once, across all
//     requests, take at most this many bytes (by buffer capacity); a
//     request whose body would go past it gets 429 (retryable) at once;
//   - ClientWriteTimeout: every write toward the client must finish within
//     it, so a client that stops reading a stream loses it, and its
//     scheduler slot is released, once its socket buffers are full and the
//     timeout passes;
//   - ClientIdleTimeout: a kept-alive connection with no request closes;
//   - MaxConnsPerClient: connections from one client address at once
//     (further ones are closed on accept);
//   - MaxStreamsPerConn: concurrent h2c streams on one connection (the
//     SETTINGS_MAX_CONCURRENT_STREAMS the gateway advertises).
//
// The memory a client can hold is thus its bodies within BodyBudget, shared
// by all clients, plus per-stream buffers bounded by MaxConnsPerClient ×
// MaxStreamsPerConn.

// Limits bound what clients can hold; the zero value of each field picks
// the default documented on it, a negative value turns it off.
type Limits struct {
	// BodyTimeout bounds the reading of one request body; 0 means 30s.
	BodyTimeout time.Duration
	// BodyBudget bounds the bytes of request bodies buffered at once; 0
	// means DefaultBodyBudget.
	BodyBudget int64
	// ClientWriteTimeout bounds each write toward the client; 0 means 30s.
	ClientWriteTimeout time.Duration
	// ClientIdleTimeout closes kept-alive client connections idle this
	// long; 0 means 2 minutes. Serve reads it once.
	ClientIdleTimeout time.Duration
	// MaxConnsPerClient bounds the connections of one client address; 0
	// means 256. Serve reads it once.
	MaxConnsPerClient int
	// MaxStreamsPerConn bounds the concurrent h2c streams of one
	// connection; 0 means 100. Serve reads it once.
	MaxStreamsPerConn int
}

// Defaults of Limits.
const (
	DefaultBodyTimeout        = 30 * time.Second
	DefaultClientWriteTimeout = 30 * time.Second
	DefaultClientIdleTimeout  = 2 * time.Minute
	// DefaultBodyBudget keeps the bodies' share of the heap at 64 MiB, so
	// that with the collector's headroom (GOGC 100) the gateway's RSS stays
	// within 256 MiB over idle under held bodies.
	DefaultBodyBudget        = 64 << 20
	DefaultMaxConnsPerClient = 256
	DefaultMaxStreamsPerConn = 100
)

func (l Limits) withDefaults() Limits {
	if l.BodyTimeout == 0 {
		l.BodyTimeout = DefaultBodyTimeout
	}
	if l.BodyBudget == 0 {
		l.BodyBudget = DefaultBodyBudget
	}
	if l.ClientWriteTimeout == 0 {
		l.ClientWriteTimeout = DefaultClientWriteTimeout
	}
	if l.ClientIdleTimeout == 0 {
		l.ClientIdleTimeout = DefaultClientIdleTimeout
	}
	if l.MaxConnsPerClient == 0 {
		l.MaxConnsPerClient = DefaultMaxConnsPerClient
	}
	if l.MaxStreamsPerConn == 0 {
		l.MaxStreamsPerConn = DefaultMaxStreamsPerConn
	}
	return l
}

// ErrBodyBudget: buffering the request body would take the gateway past
// its body budget; retryable (429), since other bodies free theirs soon.
var ErrBodyBudget = fmt.Errorf("%w: request bodies buffered at the gateway are at limits.body_budget_bytes", scheduler.ErrQueueFull)

// ErrBodyTimeout: the request body did not arrive within the body timeout.
var ErrBodyTimeout = fmt.Errorf("%w: request body not received within limits.body_timeout", exchange.ErrBadRequest)

// budget is the gateway-wide count of buffered body bytes.
type budget struct {
	used atomic.Int64
}

// take reserves n bytes of max; false (nothing taken) when they do not
// fit. max < 0 means no budget.
func (b *budget) take(n, max int64) bool {
	if max < 0 {
		b.used.Add(n)
		return true
	}
	for {
		u := b.used.Load()
		if u+n > max {
			return false
		}
		if b.used.CompareAndSwap(u, u+n) {
			return true
		}
	}
}

func (b *budget) give(n int64) { b.used.Add(-n) }

// BufferedBodyBytes is how many bytes of request bodies the gateway holds
// now (counted against Limits.BodyBudget).
func (g *Gateway) BufferedBodyBytes() int64 { return g.bodies.used.Load() }

// firstBodyChunk is the first buffer for a body of unknown length.
const firstBodyChunk = 32 << 10

// readBodyBounded reads r's body (at most limit bytes, else
// ErrBodyTooLarge) within the body timeout, counting its buffer against
// the body budget; release gives the buffer's share back (call it once
// the body is no longer used; it is safe to call when err is not nil).
func (g *Gateway) readBodyBounded(w http.ResponseWriter, r *http.Request, limit int64, lim Limits) (body []byte, release func(), err error) {
	var held int64
	release = func() {
		g.bodies.give(held)
		held = 0
	}
	rc := r.Body
	if rc == nil || rc == http.NoBody {
		return nil, release, nil
	}
	if lim.BodyTimeout > 0 {
		rctl := http.NewResponseController(w)
		if rctl.SetReadDeadline(time.Now().Add(lim.BodyTimeout)) == nil {
			defer rctl.SetReadDeadline(time.Time{})
		}
	}
	// Closed before the deadline is cleared: closing an unread body
	// discards what is left of it, under the deadline too.
	defer rc.Close()
	grow := func(n int64) bool {
		if !g.bodies.take(n, lim.BodyBudget) {
			return false
		}
		held += n
		return true
	}
	size := int64(firstBodyChunk)
	if r.ContentLength > limit {
		return nil, release, ErrBodyTooLarge
	}
	if r.ContentLength >= 0 {
		size = r.ContentLength + 1 // one more byte to see the end
	}
	if !grow(size) {
		return nil, release, ErrBodyBudget
	}
	buf := make([]byte, 0, size)
	for {
		if len(buf) == cap(buf) {
			if int64(len(buf)) > limit {
				return nil, release, ErrBodyTooLarge
			}
			next := min(2*int64(cap(buf)), limit+1)
			if next <= int64(cap(buf)) {
				next = int64(cap(buf)) + 1
			}
			if !grow(next) { // the old buffer is held until the copy
				return nil, release, ErrBodyBudget
			}
			nb := make([]byte, len(buf), next)
			copy(nb, buf)
			g.bodies.give(int64(cap(buf)))
			held -= int64(cap(buf))
			buf = nb
		}
		n, rerr := rc.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			if ne := net.Error(nil); errors.As(rerr, &ne) && ne.Timeout() {
				return nil, release, ErrBodyTimeout
			}
			return nil, release, rerr
		}
	}
	if int64(len(buf)) > limit {
		return nil, release, ErrBodyTooLarge
	}
	return buf, release, nil
}

// deadlineWriter gives every write toward the client a deadline of d from
// its start, so a client that stops reading holds its stream (and its
// scheduler slot) for at most d past its socket buffers filling up.
type deadlineWriter struct {
	http.ResponseWriter
	rc *http.ResponseController
	d  time.Duration
	ok bool // SetWriteDeadline works on this connection
}

func newDeadlineWriter(w http.ResponseWriter, d time.Duration) http.ResponseWriter {
	if d <= 0 {
		return w
	}
	dw := &deadlineWriter{ResponseWriter: w, rc: http.NewResponseController(w), d: d}
	dw.ok = dw.rc.SetWriteDeadline(time.Now().Add(d)) == nil
	if !dw.ok {
		return w
	}
	return dw
}

func (w *deadlineWriter) Write(p []byte) (int, error) {
	w.rc.SetWriteDeadline(time.Now().Add(w.d))
	return w.ResponseWriter.Write(p)
}

// Flush implements http.Flusher, under the same deadline.
func (w *deadlineWriter) Flush() { w.FlushError() }

// FlushError flushes under the same deadline and says whether it failed
// (http.ResponseController prefers it to Flush).
func (w *deadlineWriter) FlushError() error {
	w.rc.SetWriteDeadline(time.Now().Add(w.d))
	return w.rc.Flush()
}

// Unwrap lets http.ResponseController reach the connection.
func (w *deadlineWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// clientLimiter closes connections beyond max per client address.
type clientLimiter struct {
	net.Listener
	max int
	mu  sync.Mutex
	n   map[netip.Addr]int
	// refused counts connections closed on accept.
	refused *atomic.Uint64
}

func limitClients(ln net.Listener, max int, refused *atomic.Uint64) net.Listener {
	if max <= 0 {
		return ln
	}
	return &clientLimiter{Listener: ln, max: max, n: map[netip.Addr]int{}, refused: refused}
}

func (l *clientLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ap, perr := netip.ParseAddrPort(c.RemoteAddr().String())
		if perr != nil {
			return c, nil
		}
		a := ap.Addr().Unmap()
		l.mu.Lock()
		if l.n[a] >= l.max {
			l.mu.Unlock()
			l.refused.Add(1)
			c.Close()
			continue
		}
		l.n[a]++
		l.mu.Unlock()
		return &countedConn{Conn: c, l: l, a: a}, nil
	}
}

type countedConn struct {
	net.Conn
	l    *clientLimiter
	a    netip.Addr
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		if c.l.n[c.a]--; c.l.n[c.a] <= 0 {
			delete(c.l.n, c.a)
		}
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}

// validateLimits checks l; errors name the mesh key.
func validateLimits(l Limits) []error {
	var errs []error
	if l.BodyBudget > 0 && l.BodyBudget < firstBodyChunk {
		errs = append(errs, fmt.Errorf("limits.body_budget_bytes: %d must be at least %d bytes (or negative: no budget)", l.BodyBudget, firstBodyChunk))
	}
	return errs
}
