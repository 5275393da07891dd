package framed

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/peer"
	"google.golang.org/protobuf/proto"

	"github.com/llmesh/llmesh/api/schedulerv1"
)

// Preface opens each direction of a connection.
const Preface = "LLMESH-SESSION/1\r\n"

// PrefaceHeaders opens a client's connection that carries headers: the
// line, then header lines ("name: value\r\n") and an empty line, then
// frames. The service answers with Preface either way. A service older
// than headers refuses it at its version byte.
const PrefaceHeaders = "LLMESH-SESSION/2\r\n"

// Header bounds: what a service reads before the first frame.
const (
	maxHeaderLine = 4096
	maxHeaders    = 16
)

// MaxFrame bounds one frame's message: far above any batch of lease
// messages, far below what a broken or hostile peer could make a reader
// allocate.
const MaxFrame = 4 << 20

// Keepalive are the TCP keepalive bounds of both sides: a peer that
// vanished without closing (a host that lost power, a partition) is
// noticed after about Idle + Interval×Count, and its session's leases are
// freed, as the gRPC service's pings do (10s, then 5s).
var Keepalive = net.KeepAliveConfig{Enable: true, Idle: 10 * time.Second, Interval: 5 * time.Second, Count: 1}

// ErrProtocol is wrapped by every error about what the peer sent.
var ErrProtocol = errors.New("scheduler session protocol")

// Conn is one session's connection, typed by what this side receives (In)
// and sends (Out).
type Conn[In, Out proto.Message] struct {
	c      net.Conn
	r      *bufio.Reader
	newIn  func() In
	hdr    [4]byte
	in     []byte
	ctx    context.Context
	cancel context.CancelFunc

	sendMu sync.Mutex
	out    []byte

	// frames counts the frames received (pings and pongs too), for the
	// service's liveness check (watch).
	frames atomic.Uint64
	// pong: this side answers a ping (the client's side).
	pong bool
	// token is the bearer token of the client's authorization header
	// (the service's side; empty: none).
	token string
}

// Token is the bearer token the client sent in its preface's
// authorization header ("Bearer <token>"), or "".
func (fc *Conn[In, Out]) Token() string { return fc.token }

// TLS is the connection's TLS state (the client's verified certificates
// among it), or nil for a plaintext connection.
func (fc *Conn[In, Out]) TLS() *tls.ConnectionState {
	if tc, ok := fc.c.(*tls.Conn); ok {
		cs := tc.ConnectionState()
		return &cs
	}
	return nil
}

// ServerConn is the service's side: it receives SessionRequest.
type ServerConn = Conn[*schedulerv1.SessionRequest, *schedulerv1.SessionResponse]

// ClientConn is the proxy's side: it receives SessionResponse.
type ClientConn = Conn[*schedulerv1.SessionResponse, *schedulerv1.SessionRequest]

func newConn[In, Out proto.Message](parent context.Context, c net.Conn, r *bufio.Reader, ka net.KeepAliveConfig, newIn func() In) *Conn[In, Out] {
	tcpOf := c
	if tc, ok := c.(*tls.Conn); ok {
		tcpOf = tc.NetConn()
	}
	if tc, ok := tcpOf.(*net.TCPConn); ok {
		_ = tc.SetKeepAliveConfig(ka)
		_ = tc.SetNoDelay(true)
	}
	// The peer's address rides in the context as gRPC's does, for the
	// service's logs.
	ctx, cancel := context.WithCancel(peer.NewContext(parent, &peer.Peer{Addr: c.RemoteAddr(), LocalAddr: c.LocalAddr()}))
	fc := &Conn[In, Out]{c: c, r: r, newIn: newIn, ctx: ctx, cancel: cancel}
	fc.frames.Store(1) // the preface
	// The connection closes with its context: a cancelled session (the
	// client's, or a stopping service) unblocks Recv and Send.
	context.AfterFunc(ctx, func() { _ = c.Close() })
	return fc
}

// Context ends when the connection is closed (by either side's Close, or
// the parent context given when it was made); it carries the peer's
// address (peer.FromContext).
func (fc *Conn[In, Out]) Context() context.Context { return fc.ctx }

// Close closes the connection; the peer's Recv then ends.
func (fc *Conn[In, Out]) Close() error {
	fc.cancel()
	return nil
}

// Interrupt makes a Recv under way, and every later one, fail at once,
// without closing the connection: for a service that ends a session from
// outside its receiving goroutine, whose handler then returns why (Mux
// sends it in the closing frame).
func (fc *Conn[In, Out]) Interrupt() { _ = fc.c.SetReadDeadline(time.Unix(1, 0)) }

// CloseSend half-closes: the peer's Recv returns io.EOF while this side
// can still receive.
func (fc *Conn[In, Out]) CloseSend() error {
	if tc, ok := fc.c.(*net.TCPConn); ok {
		return tc.CloseWrite()
	}
	return fc.Close()
}

// Recv reads the next frame's message; io.EOF at a clean end between
// frames. Pings are answered (the client's side) and pongs taken, never
// returned.
func (fc *Conn[In, Out]) Recv() (In, error) {
	var zero In
	b, err := fc.RecvRaw()
	if err != nil {
		return zero, err
	}
	m := fc.newIn()
	if err := proto.Unmarshal(b, m); err != nil {
		return zero, fmt.Errorf("%w: frame of %d bytes is not a %s: %w", ErrProtocol, len(b), m.ProtoReflect().Descriptor().Name(), err)
	}
	return m, nil
}

// RecvRaw is Recv without decoding: the next message's bytes, valid until
// the next Recv or RecvRaw (for a receiver that decodes into structures of
// its own).
func (fc *Conn[In, Out]) RecvRaw() ([]byte, error) {
	for {
		b, closing, err := readFrameKind(fc.r, fc.hdr[:], fc.in, fc.pong)
		if err != nil {
			return nil, err
		}
		if closing {
			// The service's last word: why it ends the session.
			return nil, closingStatus(b)
		}
		fc.in = b[:0]
		fc.frames.Add(1)
		if len(b) > 0 {
			return b, nil
		}
		if fc.pong {
			if err := fc.writeFrame(nil); err != nil {
				return nil, err
			}
		}
	}
}

// Send writes m as one frame, in one write. An empty message is sent as
// nothing: a frame of length 0 is a ping.
func (fc *Conn[In, Out]) Send(m Out) error {
	fc.sendMu.Lock()
	defer fc.sendMu.Unlock()
	b := append(fc.out[:0], 0, 0, 0, 0)
	b, err := proto.MarshalOptions{}.MarshalAppend(b, m)
	if err != nil {
		return fmt.Errorf("scheduler session: %w", err)
	}
	n := len(b) - 4
	if n == 0 {
		return nil
	}
	if n > MaxFrame {
		return fmt.Errorf("%w: a message of %d bytes cannot be sent (at most %d)", ErrProtocol, n, MaxFrame)
	}
	binary.BigEndian.PutUint32(b, uint32(n))
	fc.out = b[:0]
	_, err = fc.c.Write(b)
	return err
}

// writeFrame writes a frame holding b (empty: a ping or its pong).
func (fc *Conn[In, Out]) writeFrame(b []byte) error {
	fc.sendMu.Lock()
	defer fc.sendMu.Unlock()
	f := binary.BigEndian.AppendUint32(fc.out[:0], uint32(len(b)))
	f = append(f, b...)
	fc.out = f[:0]
	_, err := fc.c.Write(f)
	return err
}

// watch is the service's liveness check of a session, gRPC's keepalive
// pings in frames: when no frame came for idle, it pings; when none came
// for timeout after that, it closes the connection, which ends the
// session and frees its leases. It ends with the connection.
//
// It looks at the frame count every idle/watchChecks rather than once per
// idle: checking once per idle would see a frame that came just after a
// check only at the next one, and ping a silent peer as late as 2×idle
// after its last frame (a session freed after 25 s instead of 15 s with
// the service's 10 s and 5 s). This way the ping leaves between idle and
// idle×(1+1/watchChecks) after the last frame, without reading a clock
// for every frame.
func (fc *Conn[In, Out]) watch(idle, timeout time.Duration) {
	step := max(idle/watchChecks, time.Millisecond)
	seen := fc.frames.Load()
	var quiet time.Duration // since the check that last saw a new frame
	pinged := false
	t := time.NewTimer(step)
	defer t.Stop()
	for {
		select {
		case <-fc.ctx.Done():
			return
		case <-t.C:
		}
		now := fc.frames.Load()
		switch {
		case now != seen:
			seen, pinged, quiet = now, false, 0
			t.Reset(step)
		case pinged:
			fc.Close() // the ping went unanswered
			return
		case quiet+step < idle:
			quiet += step
			t.Reset(step)
		default:
			if fc.writeFrame(nil) != nil {
				fc.Close()
				return
			}
			pinged = true
			t.Reset(timeout)
		}
	}
}

// watchChecks is how many times per idle period watch looks for frames.
const watchChecks = 8

// readFrame reads one frame into buf (grown as needed) and returns its
// message bytes; a closing frame is a protocol error (the service's side:
// only the service sends one).
func readFrame(r *bufio.Reader, hdr []byte, buf []byte) ([]byte, error) {
	b, _, err := readFrameKind(r, hdr, buf, false)
	return b, err
}

// readFrameKind reads one frame into buf (grown as needed) and returns its
// bytes; closing says it is a closing frame (accepted only when
// withClosing is set), whose bytes are a google.rpc.Status.
func readFrameKind(r *bufio.Reader, hdr []byte, buf []byte, withClosing bool) (b []byte, closing bool, err error) {
	if _, err := io.ReadFull(r, hdr[:4]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, false, fmt.Errorf("%w: connection ended inside a frame's length", ErrProtocol)
		}
		return nil, false, err // io.EOF: a clean end between frames
	}
	n := binary.BigEndian.Uint32(hdr)
	if withClosing && n&closingFrame != 0 {
		closing, n = true, n&^closingFrame
		if n > MaxClosing {
			return nil, false, fmt.Errorf("%w: closing frame length %d is over %d", ErrProtocol, n, MaxClosing)
		}
	}
	if n > MaxFrame {
		return nil, false, fmt.Errorf("%w: frame length %d is over %d", ErrProtocol, n, MaxFrame)
	}
	if cap(buf) < int(n) {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, false, fmt.Errorf("%w: connection ended inside a frame of %d bytes: %w", ErrProtocol, n, err)
	}
	return buf, closing, nil
}

// readPreface checks the peer's preface, failing at its first wrong byte
// (a gRPC service answers with HTTP/2 frames that begin with 0x00).
func readPreface(r *bufio.Reader) error {
	_, err := readPrefaceVersion(r, false)
	return err
}

// readPrefaceVersion reads Preface, or with headers allowed also
// PrefaceHeaders, and answers which came.
func readPrefaceVersion(r *bufio.Reader, headers bool) (withHeaders bool, err error) {
	for i := 0; i < len(Preface); i++ {
		b, err := r.ReadByte()
		if err != nil {
			return false, fmt.Errorf("%w: no preface: %w", ErrProtocol, err)
		}
		if b == Preface[i] {
			continue
		}
		if headers && b == PrefaceHeaders[i] && PrefaceHeaders[:i] == Preface[:i] {
			withHeaders = true
			continue
		}
		if withHeaders && b == PrefaceHeaders[i] {
			continue
		}
		return false, fmt.Errorf("%w: byte %d of the preface is %q, not %q", ErrProtocol, i, b, Preface[i])
	}
	return withHeaders, nil
}

// readHeaders reads the header lines after PrefaceHeaders up to the empty
// line and returns the bearer token of authorization (the only header the
// service reads; others are skipped).
func readHeaders(r *bufio.Reader) (token string, err error) {
	for n := 0; ; n++ {
		if n > maxHeaders {
			return "", fmt.Errorf("%w: more than %d preface headers", ErrProtocol, maxHeaders)
		}
		line, err := readLine(r)
		if err != nil {
			return "", err
		}
		if line == "" {
			return token, nil
		}
		name, value, ok := strings.Cut(line, ":")
		if !ok {
			return "", fmt.Errorf("%w: preface header %q has no colon", ErrProtocol, line)
		}
		if strings.EqualFold(strings.TrimSpace(name), "authorization") {
			v := strings.TrimSpace(value)
			scheme, tok, ok := strings.Cut(v, " ")
			if !ok || !strings.EqualFold(scheme, "bearer") || strings.TrimSpace(tok) == "" {
				return "", fmt.Errorf("%w: the authorization header must be \"Bearer <token>\"", ErrProtocol)
			}
			token = strings.TrimSpace(tok)
			if strings.ContainsAny(token, " \t") {
				return "", fmt.Errorf("%w: the bearer token holds whitespace", ErrProtocol)
			}
		}
	}
}

// readLine reads one CRLF-ended line of at most maxHeaderLine bytes.
func readLine(r *bufio.Reader) (string, error) {
	var b []byte
	for {
		c, err := r.ReadByte()
		if err != nil {
			return "", fmt.Errorf("%w: connection ended inside the preface headers: %w", ErrProtocol, err)
		}
		if c == '\n' {
			if len(b) == 0 || b[len(b)-1] != '\r' {
				return "", fmt.Errorf("%w: a preface header line must end with CRLF", ErrProtocol)
			}
			return string(b[:len(b)-1]), nil
		}
		if len(b) >= maxHeaderLine {
			return "", fmt.Errorf("%w: a preface header line over %d bytes", ErrProtocol, maxHeaderLine)
		}
		b = append(b, c)
	}
}

// Dial opens a session with the service at addr: it connects (over TLS
// with tlsCfg, when not nil), sends the preface and waits for the
// service's, all within ctx. The connection then outlives ctx until Close.
func Dial(ctx context.Context, addr string, tlsCfg *tls.Config) (*ClientConn, error) {
	return DialToken(ctx, addr, tlsCfg, "")
}

// DialToken is Dial with a bearer token, sent in the preface's
// authorization header (PrefaceHeaders); an empty token sends the plain
// Preface, as Dial does.
func DialToken(ctx context.Context, addr string, tlsCfg *tls.Config, token string) (*ClientConn, error) {
	hello := Preface
	if token != "" {
		if strings.ContainsAny(token, "\r\n") {
			return nil, fmt.Errorf("scheduler session with %s: the token holds a line break", addr)
		}
		hello = PrefaceHeaders + "authorization: Bearer " + token + "\r\n\r\n"
	}
	var (
		c   net.Conn
		err error
	)
	if tlsCfg != nil {
		d := tls.Dialer{Config: tlsCfg}
		c, err = d.DialContext(ctx, "tcp", addr)
	} else {
		var d net.Dialer
		c, err = d.DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	r := bufio.NewReaderSize(c, 64<<10)
	err = func() error {
		if _, err := io.WriteString(c, hello); err != nil {
			return err
		}
		if err := readPreface(r); err != nil {
			return fmt.Errorf("%w (a service older than the framed transport closes the connection: use transport grpc)", err)
		}
		return nil
	}()
	if !stop() {
		_ = c.Close()
		return nil, fmt.Errorf("scheduler session with %s: %w", addr, ctx.Err())
	}
	if err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("scheduler session with %s: %w", addr, err)
	}
	fc := newConn[*schedulerv1.SessionResponse, *schedulerv1.SessionRequest](context.Background(), c, r, Keepalive, func() *schedulerv1.SessionResponse { return new(schedulerv1.SessionResponse) })
	fc.pong = true
	return fc, nil
}
