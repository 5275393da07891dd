package framed

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"github.com/llmesh/llmesh/api/schedulerv1"
)

// SniffTimeout is Mux.HandshakeTimeout's default.
const SniffTimeout = 5 * time.Second

// Mux splits one listener's connections between the framed Session
// protocol (handed to Serve's handler) and everything else (gRPC, returned
// by Other's Accept).
type Mux struct {
	// HandshakeTimeout bounds how long a new connection may take to send
	// its first byte and, for a framed session, its whole preface (with
	// TLS, the handshake too); a connection that stalls is closed. Zero
	// is SniffTimeout. Set it before Serve.
	HandshakeTimeout time.Duration

	l     net.Listener
	ka    net.KeepAliveConfig
	other chan net.Conn
	done  chan struct{}
	once  sync.Once
	err   error // Accept's error that ended the mux; set before done closes

	mu    sync.Mutex
	conns map[*ServerConn]struct{}
	wg    sync.WaitGroup
}

// NewMux returns a mux over l; nothing is accepted until Serve. ka is the
// framed connections' TCP keepalive (Keepalive when its Idle is 0), and
// its Idle and Interval the session pings': a ping after Idle without a
// frame, the connection closed when Interval passes without one after it.
func NewMux(l net.Listener, ka net.KeepAliveConfig) *Mux {
	if ka.Idle <= 0 {
		ka = Keepalive
	}
	return &Mux{l: l, ka: ka, other: make(chan net.Conn), done: make(chan struct{}), conns: map[*ServerConn]struct{}{}}
}

// Serve accepts connections until l fails or Close: each framed one gets
// its own goroutine running handle (the session) and is closed when handle
// returns, after a closing frame that tells the client handle's error
// (Conn.CloseWith) when there is one; the others go to Other. Serve returns after every handler has
// returned.
func (m *Mux) Serve(ctx context.Context, handle func(*ServerConn) error) error {
	defer m.wg.Wait()
	var backoff time.Duration
	for {
		c, err := m.l.Accept()
		if err != nil {
			// A temporary failure (out of file descriptors) is waited
			// out, as gRPC's own Serve does; anything else ends the mux.
			if t, ok := err.(interface{ Temporary() bool }); ok && t.Temporary() {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				select {
				case <-time.After(backoff):
					continue
				case <-m.done:
					return net.ErrClosed
				}
			}
			m.stop(err)
			return err
		}
		backoff = 0
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			m.route(ctx, c, handle)
		}()
	}
}

func (m *Mux) route(ctx context.Context, c net.Conn, handle func(*ServerConn) error) {
	hto := m.HandshakeTimeout
	if hto <= 0 {
		hto = SniffTimeout
	}
	_ = c.SetReadDeadline(time.Now().Add(hto))
	r := bufio.NewReaderSize(c, 64<<10)
	first, err := r.Peek(1)
	if err != nil {
		_ = c.Close()
		return
	}
	if first[0] != Preface[0] {
		_ = c.SetReadDeadline(time.Time{})
		select {
		case m.other <- &peeked{Conn: c, r: r}:
		case <-m.done:
			_ = c.Close()
		}
		return
	}
	withHeaders, err := readPrefaceVersion(r, true)
	if err != nil {
		_ = c.Close()
		return
	}
	var token string
	if withHeaders {
		if token, err = readHeaders(r); err != nil {
			_ = c.Close()
			return
		}
	}
	_ = c.SetReadDeadline(time.Time{})
	if _, err := io.WriteString(c, Preface); err != nil {
		_ = c.Close()
		return
	}
	sc := newConn[*schedulerv1.SessionRequest, *schedulerv1.SessionResponse](ctx, c, r, m.ka, func() *schedulerv1.SessionRequest { return new(schedulerv1.SessionRequest) })
	sc.token = token
	m.mu.Lock()
	select {
	case <-m.done:
		m.mu.Unlock()
		sc.Close()
		return
	default:
	}
	m.conns[sc] = struct{}{}
	m.mu.Unlock()
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		sc.watch(m.ka.Idle, m.ka.Interval)
	}()
	if err := handle(sc); err != nil && sc.ctx.Err() == nil {
		// Why the session ends reaches the client (a closing frame).
		_ = sc.CloseWith(err)
	}
	sc.Close()
	m.mu.Lock()
	delete(m.conns, sc)
	m.mu.Unlock()
}

// Close stops accepting and closes every framed session's connection (their
// handlers then end); Other's Accept returns net.ErrClosed.
func (m *Mux) Close() error {
	err := m.l.Close()
	m.stop(net.ErrClosed)
	return err
}

func (m *Mux) stop(err error) {
	m.once.Do(func() {
		m.err = err
		m.mu.Lock()
		close(m.done)
		for sc := range m.conns {
			sc.Close()
		}
		m.mu.Unlock()
	})
}

// Other is a listener of the connections that are not framed sessions.
func (m *Mux) Other() net.Listener { return otherListener{m} }

type otherListener struct{ m *Mux }

func (o otherListener) Accept() (net.Conn, error) {
	select {
	case c := <-o.m.other:
		return c, nil
	case <-o.m.done:
		if errors.Is(o.m.err, net.ErrClosed) || o.m.err == nil {
			return nil, net.ErrClosed
		}
		return nil, o.m.err
	}
}

func (o otherListener) Close() error   { return o.m.Close() }
func (o otherListener) Addr() net.Addr { return o.m.l.Addr() }

// peeked is a connection whose first bytes were read into r.
type peeked struct {
	net.Conn
	r *bufio.Reader
}

// NetConn is the connection p reads from (a *tls.Conn over TLS), for the
// service's view of the client's certificate.
func (p *peeked) NetConn() net.Conn { return p.Conn }

func (p *peeked) Read(b []byte) (int, error) {
	if p.r != nil {
		if p.r.Buffered() > 0 {
			return p.r.Read(b)
		}
		p.r = nil
	}
	return p.Conn.Read(b)
}
