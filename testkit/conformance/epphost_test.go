package conformance

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/llmesh/llmesh/epp"
	"github.com/llmesh/llmesh/epp/epptest"
	"github.com/llmesh/llmesh/exchange"
	"github.com/llmesh/llmesh/scheduler/server"
	"github.com/llmesh/llmesh/testkit/fakesdk"
)

// eppHost is `llmesh epp` (epp.Server on a loopback gRPC server, with the
// mesh's in-process schedulers) driven by epptest as Envoy's ext_proc
// filter in full duplex mode; the test plays Envoy's router: it sends what
// the picker let through to the endpoint the picker named (the mesh's
// endpoints are the recorders in front of the sim) and relays the
// upstream's response through the picker, message by message.
type eppHost struct {
	d     *epptest.Driver
	rec   *records
	count *admissions
	h1    *http.Client
	h2c   *http.Client
}

func startEPP(t *testing.T, up upstreams) *eppHost {
	t.Helper()
	mesh, _ := loadMesh(t, up)
	ms, err := server.NewMeshScheduler(mesh, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ms.Close() })
	h := &eppHost{rec: newRecords(), count: newAdmissions(ms.Set)}
	srv, err := epp.New(epp.Config{Mesh: mesh, Listener: "main", Admitter: h.count, OnDone: func(r epp.Record) {
		fr := exchange.Record{Observation: r.Observation, Class: r.Class, Model: r.Model, Pool: r.Pool,
			Outcome: r.Outcome, Preemptions: r.Preemptions, Endpoint: r.Endpoint}
		h.rec.add(recOf(&fr))
	}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	srv.Register(g)
	go func() { _ = g.Serve(ln) }()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(); g.Stop() })
	h.d = &epptest.Driver{Client: extprocv3.NewExternalProcessorClient(conn),
		RequestMode: epptest.FullDuplex, ResponseMode: epptest.FullDuplex}
	h.h1 = &http.Client{Timeout: 30 * time.Second}
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	h.h2c = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Protocols: &p}}
	t.Cleanup(func() { h.h1.CloseIdleConnections(); h.h2c.CloseIdleConnections() })
	return h
}

func (h *eppHost) name() string          { return "epp" }
func (h *eppHost) recs() *records        { return h.rec }
func (h *eppHost) adm() admissionWatcher { return h.count }

func (h *eppHost) do(t *testing.T, r request) response {
	t.Helper()
	defer releaseStarted(&r)
	hdr := map[string]string{":method": "POST", ":path": r.path}
	for i := 0; i+1 < len(r.headers); i += 2 {
		hdr[strings.ToLower(r.headers[i])] = r.headers[i+1]
	}
	var chunks [][]byte
	if len(r.body) > 0 {
		chunks = [][]byte{r.body}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if r.queued != nil {
		// The client goes away while the picker holds the request.
		go func() { r.queued(); cancel() }()
	}
	call, pick, err := h.d.Start(ctx, epptest.Request{Headers: hdr, Chunks: chunks})
	if err != nil {
		if ctx.Err() != nil {
			return response{Cancelled: true}
		}
		t.Fatalf("epp: %v", err)
	}
	if pick.Immediate != nil {
		call.Cancel()
		return immediateReply(pick.Immediate, r.grpc())
	}
	c := h.h1
	if r.grpc() {
		c = h.h2c
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+pick.Header+r.path, bytes.NewReader(pick.Body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		if !strings.HasPrefix(k, ":") && !slices.Contains(pick.Removed, k) {
			req.Header.Set(k, v)
		}
	}
	up, err := c.Do(req)
	if err != nil {
		t.Fatalf("epp: upstream: %v", err)
	}
	defer up.Body.Close()
	rh := map[string]string{}
	for k, vs := range up.Header {
		rh[strings.ToLower(k)] = vs[0]
	}
	body := &clientSide{r: up.Body, req: &r}
	rep, err := call.Relay(epptest.Response{Status: up.StatusCode, Headers: rh, Body: body, Trailers: func() map[string]string {
		tr := map[string]string{}
		for k, vs := range up.Trailer {
			tr[strings.ToLower(k)] = vs[0]
		}
		return tr
	}})
	out := response{Status: up.StatusCode, ContentType: up.Header.Get("Content-Type"), RetryAfter: up.Header.Get("Retry-After"), Body: rep.Body}
	switch {
	case body.cancelled:
		// The client went away: Envoy ends the ext_proc stream.
		out.Cancelled = true
		call.Cancel()
		return out
	case body.err != nil:
		// The upstream reset: Envoy resets the client's stream and ends
		// the ext_proc stream.
		out.Reset = true
		call.Cancel()
		return out
	case err != nil:
		t.Fatalf("epp: relay: %v", err)
	case rep.Immediate != nil && !rep.HeadersSent:
		return immediateReply(rep.Immediate, r.grpc())
	case rep.Immediate != nil:
		// A local reply after response headers: Envoy resets the stream.
		out.Reset = true
		return out
	}
	grpcTrailers(&out, up.Header, up.Trailer)
	return out
}

// clientSide reads the upstream's body for the relay and plays the
// client: it releases a scenario waiting for the first bytes once they
// were relayed, and goes away after cancelAfter pieces.
type clientSide struct {
	r         io.Reader
	req       *request
	reads     int
	cancelled bool
	err       error
}

var errClientGone = errors.New("client gone")

func (c *clientSide) Read(p []byte) (int, error) {
	if c.reads >= 1 {
		// The previous piece went through the picker to the client.
		releaseStarted(c.req)
	}
	if c.req.cancelAfter > 0 && c.reads >= c.req.cancelAfter {
		c.cancelled = true
		return 0, errClientGone
	}
	n, err := c.r.Read(p)
	if n > 0 {
		c.reads++
	}
	if err != nil && !errors.Is(err, io.EOF) {
		c.err = err
	}
	return n, err
}

// immediateReply is what a client of Envoy receives for the picker's
// immediate response: Envoy's local reply (Filter::sendImmediateResponse
// in the ext_proc filter calls sendLocalReply), trailers-only for gRPC
// with the given grpc_status (else mapped from the HTTP status).
func immediateReply(im *extprocv3.ImmediateResponse, grpc bool) response {
	hdr := http.Header{}
	for _, h := range im.GetHeaders().GetSetHeaders() {
		v := h.GetHeader().GetValue()
		if raw := h.GetHeader().GetRawValue(); len(raw) > 0 {
			v = string(raw)
		}
		hdr.Set(h.GetHeader().GetKey(), v)
	}
	code := int(im.GetStatus().GetCode())
	out := response{Status: code, ContentType: hdr.Get("Content-Type"), RetryAfter: hdr.Get("Retry-After")}
	if !grpc {
		out.Body = im.GetBody()
		return out
	}
	out.Status = http.StatusOK
	out.ContentType = "application/grpc"
	gs := fakesdk.HTTPToGRPCStatus(code)
	if im.GetGrpcStatus() != nil {
		gs = int64(im.GetGrpcStatus().GetStatus())
	}
	out.GRPCStatus = strconv.FormatInt(gs, 10)
	out.GRPCMessage = string(im.GetBody())
	out.Pushback = hdr.Get("Grpc-Retry-Pushback-Ms") != ""
	return out
}
