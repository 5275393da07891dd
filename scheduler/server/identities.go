package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/server/identity"
)

// Reasons a client's session or Start is refused for its identity: the
// reason label of llmesh_scheduler_service_refusals_total.
const (
	RefusedUnauthenticated = "unauthenticated" // unknown token, or no identity and no default entry
	RefusedMaxSessions     = "max_sessions"
	RefusedPool            = "pool"
	RefusedClass           = "class"
	RefusedMaxLeases       = "max_leases"
	RefusedMaxQueued       = "max_queued"
	RefusedMaxBytes        = "max_bytes"
)

// who is a session's identity and the counts of what it holds, shared by
// every session of that identity. A reload of the identities may replace
// id (the same name with other classes, pools or limits) or revoke the
// session (its identity removed, or its credentials now another's or
// nobody's).
type who struct {
	id atomic.Pointer[identity.Identity]
	st *identState
	// The credentials the session proved itself with, to resolve it again
	// after a reload.
	cert  *x509.Certificate
	token string

	// revoked is set once, by a reload (revoke), before any session of
	// the reload is ended: an admission decided for w after it is
	// released, not answered, so the slots the reload frees go to
	// others.
	revoked atomic.Pointer[error]

	mu       sync.Mutex
	onRevoke func(error) // the session's (or Admit stream's) end; nil until set
	ended    bool        // onRevoke was run, or is to be run as soon as it is set
}

// identity is the session's identity as of the last reload.
func (w *who) identity() *identity.Identity { return w.id.Load() }

// revokedErr is why a reload revoked w (its UNAUTHENTICATED status), or
// nil: not revoked, or no identities (w nil).
func (w *who) revokedErr() error {
	if w == nil {
		return nil
	}
	if p := w.revoked.Load(); p != nil {
		return *p
	}
	return nil
}

// setOnRevoke sets what a revocation does; when the session was revoked
// and ended already it is done at once.
func (w *who) setOnRevoke(f func(error)) {
	w.mu.Lock()
	w.onRevoke = f
	ended := w.ended
	w.mu.Unlock()
	if ended {
		f(w.revokedErr())
	}
}

// revoke marks w revoked with err; a later call changes nothing.
func (w *who) revoke(err error) { w.revoked.CompareAndSwap(nil, &err) }

// end runs the revocation's onRevoke, once: the session ends.
func (w *who) end() {
	w.mu.Lock()
	if w.ended {
		w.mu.Unlock()
		return
	}
	w.ended = true
	f := w.onRevoke
	w.mu.Unlock()
	if f != nil {
		f(w.revokedErr())
	}
}

type identState struct {
	sessions, leases, queued atomic.Int64
	bytes                    atomic.Int64 // startBytes of its leases
}

// startOverhead is what the service keeps for a lease beyond its Start's
// variable fields (its entry in the session and the scheduler).
const startOverhead = 64

// startBytes is what a lease of req costs its identity's max_bytes: the
// Start's id, affinity and block hashes, which the service holds while
// the lease waits or runs, and a fixed overhead.
func startBytes(req *scheduler.Request) int64 {
	return startOverhead + int64(len(req.ID)+len(req.Affinity)+8*len(req.Blocks))
}

// identities is the service's view of an identities file: the compiled
// set, the counts of each identity (by name, so that they outlive a
// reload that keeps the identity), and the open sessions, to resolve again
// when the set is replaced. mu guards set, state and open; the counters
// are atomics.
type identities struct {
	mu       sync.Mutex
	set      *identity.Set
	state    map[string]*identState
	open     map[*who]struct{}
	refusals *prometheus.CounterVec
	defClass func() string // the mesh's default class, for a Start without one
	log      logLimiter
}

// SetIdentities makes the service trust identities, not fields: every
// session is resolved to one of set's identities (by the client's bearer
// token or its verified certificate) and its Starts are held to that
// identity's classes, pools and limits. defaultClass names the class a
// Start without one gets (the mesh's default class); nil takes "" as is.
// A nil set trusts every client, as before. Call it before serving;
// ReplaceIdentities changes the set while serving.
func (s *Server) SetIdentities(set *identity.Set, defaultClass func() string) {
	if set == nil {
		s.ids = nil
		return
	}
	ids := &identities{set: set, state: map[string]*identState{}, open: map[*who]struct{}{}, defClass: defaultClass,
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmesh_scheduler_service_refusals_total",
			Help: "Sessions and Starts the service refused for the client's identity, by identity and reason.",
		}, []string{"identity", "reason"})}
	for _, id := range set.All() {
		ids.state[id.Name] = &identState{}
	}
	if ids.defClass == nil {
		ids.defClass = func() string { return "" }
	}
	s.ids = ids
}

// ReplaceIdentities puts set in place of the identities the service runs
// with (a reloaded identities file) and answers how many sessions it
// closed. Every open session is resolved again with the credentials it
// opened with: one that resolves to the same identity stays, held to the
// new entry's classes, pools and limits from its next Start (its counts
// carry over); one whose identity is gone, or whose token or certificate
// now names another identity or none, is closed (ErrRevoked): its waiting
// requests are rejected and its leases released. It needs a service
// started with identities (SetIdentities); set must not be nil.
func (s *Server) ReplaceIdentities(set *identity.Set) (closed int, err error) {
	if s.ids == nil {
		return 0, errors.New("scheduler: the service runs without identities; restart it with an identities file")
	}
	if set == nil {
		return 0, errors.New("scheduler: no identities to replace them with")
	}
	ids := s.ids
	var revoke []*who
	var why []error
	ids.mu.Lock()
	state := make(map[string]*identState, len(set.All()))
	for _, id := range set.All() {
		if st := ids.state[id.Name]; st != nil {
			state[id.Name] = st
		} else {
			state[id.Name] = &identState{}
		}
	}
	ids.set, ids.state = set, state
	for w := range ids.open {
		old := w.identity()
		id, rerr := set.Resolve(w.cert, w.token)
		switch {
		case rerr != nil:
			rerr = fmt.Errorf("%w: identity %s: %w", ErrRevoked, old.Name, rerr)
		case id.Name != old.Name:
			rerr = fmt.Errorf("%w: identity %s: its credentials now prove %s", ErrRevoked, old.Name, id.Name)
		default:
			w.id.Store(id)
			continue
		}
		delete(ids.open, w)
		revoke, why = append(revoke, w), append(why, rerr)
	}
	ids.mu.Unlock()
	// Every session is marked before any ends: the slots the first ones
	// free are not given to another revoked session's waiting request.
	for i, w := range revoke {
		w.revoke(status.Error(codes.Unauthenticated, "scheduler: "+why[i].Error()))
	}
	for _, w := range revoke {
		w.end()
	}
	return len(revoke), nil
}

// ErrRevoked is the cause a session closed by a reload of the identities
// is told (its gRPC status is UNAUTHENTICATED).
var ErrRevoked = errors.New("the session's identity was removed or changed by a reload of the identities file")

// Refusals is the counter of identity refusals, for the admin /metrics;
// nil without identities.
func (s *Server) Refusals() prometheus.Collector {
	if s.ids == nil {
		return nil
	}
	return s.ids.refusals
}

// refuse counts and logs (at most once per identity and reason every
// logEvery) a refusal.
func (s *Server) refuse(name, reason, peer, format string, args ...any) {
	s.ids.refusals.WithLabelValues(name, reason).Inc()
	if n, ok := s.ids.log.allow(name+"/"+reason, s.clk.Now()); ok {
		more := ""
		if n > 0 {
			more = fmt.Sprintf(" (and %d more like it since the last line)", n)
		}
		s.logf("scheduler: %s (identity %s) refused: %s%s\n", peer, name, fmt.Sprintf(format, args...), more)
	}
}

// identify resolves a session's identity; nil without identities. The
// returned release undoes its session count and forgets it.
func (s *Server) identify(stream interface{ Context() context.Context }) (*who, func(), error) {
	if s.ids == nil {
		return nil, func() {}, nil
	}
	ids := s.ids
	ctx := stream.Context()
	cert, token := credentialsOf(stream)
	ids.mu.Lock()
	id, err := ids.set.Resolve(cert, token)
	if err != nil {
		ids.mu.Unlock()
		s.refuse("unknown", RefusedUnauthenticated, peerOf(ctx), "%v", err)
		return nil, nil, status.Errorf(codes.Unauthenticated, "scheduler: %v", err)
	}
	w := &who{st: ids.state[id.Name], cert: cert, token: token}
	w.id.Store(id)
	if n := w.st.sessions.Add(1); id.MaxSessions > 0 && n > int64(id.MaxSessions) {
		w.st.sessions.Add(-1)
		ids.mu.Unlock()
		s.refuse(id.Name, RefusedMaxSessions, peerOf(ctx), "%d sessions open, its limit is %d", n-1, id.MaxSessions)
		return nil, nil, status.Errorf(codes.ResourceExhausted, "scheduler: identity %s holds %d sessions, its limit", id.Name, id.MaxSessions)
	}
	ids.open[w] = struct{}{}
	ids.mu.Unlock()
	return w, func() {
		ids.mu.Lock()
		delete(ids.open, w)
		ids.mu.Unlock()
		w.st.sessions.Add(-1)
	}, nil
}

// credentialsOf is the verified client certificate (nil: none) and bearer
// token ("" : none) of a session: a framed connection's own, or a gRPC
// stream's (its peer's TLS state, its authorization metadata).
func credentialsOf(stream interface{ Context() context.Context }) (*x509.Certificate, string) {
	var cs *tls.ConnectionState
	var token string
	if fc, ok := stream.(interface {
		Token() string
		TLS() *tls.ConnectionState
	}); ok {
		cs, token = fc.TLS(), fc.Token()
	} else {
		cs, token = grpcCredentials(stream.Context())
	}
	if cs == nil || len(cs.VerifiedChains) == 0 || len(cs.PeerCertificates) == 0 {
		return nil, token
	}
	return cs.PeerCertificates[0], token
}

func grpcCredentials(ctx context.Context) (*tls.ConnectionState, string) {
	var cs *tls.ConnectionState
	if p, ok := peer.FromContext(ctx); ok {
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
			cs = &ti.State
		}
	}
	var token string
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		for _, v := range md.Get("authorization") {
			if scheme, tok, ok := strings.Cut(strings.TrimSpace(v), " "); ok && strings.EqualFold(scheme, "bearer") {
				token = strings.TrimSpace(tok)
			}
		}
	}
	return cs, token
}

// admissible checks a Start against its session's identity: the reason
// (one of the Refused constants) and a message when refused, "" when not.
func (w *who) admissible(ids *identities, req *scheduler.Request) (reason, msg string) {
	id := w.identity()
	if !id.AllowsPool(req.Pool) {
		return RefusedPool, fmt.Sprintf("identity %s may not use pool %q", id.Name, req.Pool)
	}
	class := req.Class
	if class == "" {
		class = ids.defClass()
	}
	if !id.AllowsClass(class) {
		return RefusedClass, fmt.Sprintf("identity %s may not use class %q", id.Name, class)
	}
	if id.MaxLeases > 0 && w.st.leases.Load() >= int64(id.MaxLeases) {
		return RefusedMaxLeases, fmt.Sprintf("identity %s holds %d leases, its limit", id.Name, id.MaxLeases)
	}
	if id.MaxQueued > 0 && w.st.queued.Load() >= int64(id.MaxQueued) {
		return RefusedMaxQueued, fmt.Sprintf("identity %s has %d requests waiting, its limit", id.Name, id.MaxQueued)
	}
	if n := startBytes(req); id.MaxBytes > 0 && w.st.bytes.Load()+n > id.MaxBytes {
		return RefusedMaxBytes, fmt.Sprintf("identity %s holds %d bytes of requests, and this one's %d would pass its limit of %d",
			id.Name, w.st.bytes.Load(), n, id.MaxBytes)
	}
	return "", ""
}

// logLimiter lets one line per key through every logEvery and counts the
// ones it held back.
type logLimiter struct {
	mu   sync.Mutex
	last map[string]time.Time
	held map[string]int
}

const logEvery = 10 * time.Second

func (l *logLimiter) allow(key string, now time.Time) (suppressed int, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.last == nil {
		l.last, l.held = map[string]time.Time{}, map[string]int{}
	}
	if t, seen := l.last[key]; seen && now.Sub(t) < logEvery {
		l.held[key]++
		return 0, false
	}
	n := l.held[key]
	l.last[key], l.held[key] = now, 0
	return n, true
}

// tlsPassthrough is the gRPC side's transport credentials when the
// listener already speaks TLS (Run wraps it, so that both transports share
// one handshake): it adds nothing to the connection, and tells gRPC the
// TLS state, so a stream's peer carries the client's certificate.
type tlsPassthrough struct{}

var _ credentials.TransportCredentials = tlsPassthrough{}

func (tlsPassthrough) ServerHandshake(c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	for inner := c; inner != nil; {
		if tc, ok := inner.(*tls.Conn); ok {
			return c, credentials.TLSInfo{State: tc.ConnectionState(),
				CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}, nil
		}
		u, ok := inner.(interface{ NetConn() net.Conn })
		if !ok {
			break
		}
		inner = u.NetConn()
	}
	return c, nil, nil
}

func (tlsPassthrough) ClientHandshake(context.Context, string, net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, fmt.Errorf("scheduler: server-side credentials only")
}

func (tlsPassthrough) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "tls"}
}
func (tlsPassthrough) Clone() credentials.TransportCredentials { return tlsPassthrough{} }
func (tlsPassthrough) OverrideServerName(string) error         { return nil }
