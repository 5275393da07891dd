package relocatehttp

import (
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"

	"github.com/llmesh/llmesh/exchange"
	"github.com/llmesh/llmesh/exchange/relocate"
)

// Options are the middleware's hooks.
type Options struct {
	// OnRelocated is called once per relocated value with its kind
	// (relocate.KindGRPC or relocate.KindHTTP) and the bytes moved. Nil does
	// nothing.
	OnRelocated relocate.OnRelocated
	// OnRefused is called with the error of each request the middleware
	// answered itself (limits, bad values, malformed bodies). Nil does
	// nothing.
	OnRefused func(r *http.Request, err error)
}

// Middleware relocates oversized prompts before calling the next handler.
type Middleware struct {
	next http.Handler
	rel  atomic.Pointer[relocate.Relocator]
	opts Options
}

// New returns the middleware in front of next. A nil rel passes every
// request through unchanged until SetRelocator installs rules.
func New(next http.Handler, rel *relocate.Relocator, opts Options) *Middleware {
	m := &Middleware{next: next, opts: opts}
	m.rel.Store(rel)
	return m
}

// SetRelocator installs new rules for requests that start from now on.
func (m *Middleware) SetRelocator(rel *relocate.Relocator) { m.rel.Store(rel) }

// ServeHTTP implements http.Handler.
func (m *Middleware) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rel := m.rel.Load()
	if rel == nil {
		m.next.ServeHTTP(w, r)
		return
	}
	switch exchange.GRPCKindOf(r.Header.Get("Content-Type")) {
	case exchange.GRPC, exchange.GRPCWeb:
		m.serveGRPC(w, r, rel)
		return
	case exchange.GRPCWebText:
		// Base64 frames are not decoded: nothing is relocated into them
		// (and no JSON rule applies to them).
		m.next.ServeHTTP(w, r)
		return
	}
	if r.Method == http.MethodPost || r.Method == http.MethodPut || r.Method == http.MethodPatch {
		m.serveJSON(w, r, rel)
		return
	}
	m.next.ServeHTTP(w, r)
}

func (m *Middleware) serveGRPC(w http.ResponseWriter, r *http.Request, rel *relocate.Relocator) {
	plan, err := rel.PlanGRPC(r.URL.Path, r.Header)
	if err != nil {
		m.refuseGRPC(w, r, err)
		return
	}
	if plan == nil {
		m.next.ServeHTTP(w, r)
		return
	}
	body := relocate.NewGRPCReader(r.Body, plan, r.Header.Get("Grpc-Encoding"), m.opts.OnRelocated)
	// Reading the first message before forwarding lets a limit or a broken
	// frame be answered with its own status instead of a failed upstream
	// request. LLM calls send their first message with the call.
	if err := body.Prepare(); err != nil {
		m.refuseGRPC(w, r, err)
		return
	}
	r2 := r.Clone(r.Context())
	r2.Header.Del(plan.Key)
	r2.Header.Del("Content-Length")
	r2.ContentLength = -1
	r2.Body = body
	r2.GetBody = nil
	m.next.ServeHTTP(w, r2)
}

func (m *Middleware) serveJSON(w http.ResponseWriter, r *http.Request, rel *relocate.Relocator) {
	plan, err := rel.PlanHTTP(r.URL.Path, r.Header)
	if err != nil {
		m.refuseHTTP(w, r, err)
		return
	}
	if plan == nil {
		m.next.ServeHTTP(w, r)
		return
	}
	if err := plan.CheckBodySize(r.ContentLength); err != nil {
		m.refuseHTTP(w, r, err)
		return
	}
	limit := int64(plan.Rule.MaxBody)
	// The body without the prompt is small; it is read whole (bounded by
	// max_body) because the value is spliced in near its end.
	buf := make([]byte, 0, max(r.ContentLength, 512))
	body, err := readAtMost(r.Body, buf, limit+1)
	if err != nil {
		m.refuseHTTP(w, r, errors.Join(relocate.ErrMalformed, err))
		return
	}
	out, err := relocate.RewriteJSON(body, plan, m.opts.OnRelocated)
	if err != nil {
		m.refuseHTTP(w, r, err)
		return
	}
	r2 := r.Clone(r.Context())
	r2.Header.Del(plan.Header)
	r2.ContentLength = int64(out.Len())
	r2.Header.Set("Content-Length", strconv.Itoa(out.Len()))
	r2.Body = io.NopCloser(out.Reader())
	// GetBody lets a host that re-sends the request (after a preemption)
	// replay the rewritten body.
	r2.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(out.Reader()), nil }
	m.next.ServeHTTP(w, r2)
}

// readAtMost appends up to n bytes of rd to buf.
func readAtMost(rd io.Reader, buf []byte, n int64) ([]byte, error) {
	for int64(len(buf)) < n {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		free := buf[len(buf):min(int64(cap(buf)), n)]
		k, err := rd.Read(free)
		buf = buf[:len(buf)+k]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
	return buf, nil
}

// IsGRPC reports whether r is a gRPC call whose messages relocation
// rewrites: application/grpc or binary application/grpc-web (the same
// framing), with or without a +codec or parameters (exchange.GRPCKindOf);
// not gRPC-Web-text, whose base64 body is passed through as it is.
func IsGRPC(r *http.Request) bool {
	return exchange.GRPCKindOf(r.Header.Get("Content-Type")).Framed()
}

func (m *Middleware) refuseGRPC(w http.ResponseWriter, r *http.Request, err error) {
	if m.opts.OnRefused != nil {
		m.opts.OnRefused(r, err)
	}
	writeGRPCError(w, exchange.GRPCKindOf(r.Header.Get("Content-Type")), err)
}

func (m *Middleware) refuseHTTP(w http.ResponseWriter, r *http.Request, err error) {
	if m.opts.OnRefused != nil {
		m.opts.OnRefused(r, err)
	}
	WriteHTTPError(w, err)
}

// writeGRPCError answers a gRPC call with a trailers-only response of kind's
// content type carrying the status code and message of the core's reply for
// err (exchange.ReplyFor).
func writeGRPCError(w http.ResponseWriter, kind exchange.GRPCKind, err error) {
	r := exchange.ReplyFor(err)
	h := w.Header()
	h.Set("Content-Type", kind.ContentType())
	h.Set("Grpc-Status", strconv.Itoa(r.GRPCCode))
	h.Set("Grpc-Message", exchange.GRPCMessage(r.Message))
	w.WriteHeader(http.StatusOK)
}

// WriteHTTPError answers with the HTTP status and OpenAI error body of the
// core's reply for err (exchange.ReplyFor).
func WriteHTTPError(w http.ResponseWriter, err error) {
	r := exchange.ReplyFor(err)
	b := r.OpenAIBody()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(r.HTTPStatus)
	_, _ = w.Write(b)
}
