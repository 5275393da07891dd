package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/envoyproxy/envoy/contrib/golang/common/go/api"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/envoyfilter"
	"github.com/llmesh/llmesh/envoyfilter/process"
	"github.com/llmesh/llmesh/exchange"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/testkit/fakesdk"
)

// envoyHost runs envoyfilter inside the fake SDK; the test plays Envoy's
// router: what the filter lets through is sent to the pool's upstream, and
// the upstream's response is fed back through the encode callbacks as the
// network delivers it.
type envoyHost struct {
	plugin *envoyfilter.Plugin
	cfg    interface{}
	up     upstreams
	rec    *records
	count  *admissions
	h1     *http.Client
	h2c    *http.Client
}

type envoyRecorder struct{ r *records }

func (e envoyRecorder) Record(r exchange.Record) {
	e.r.add(recOf(&r))
}

var _ envoyfilter.Recorder = envoyRecorder{}

func startEnvoy(t *testing.T, up upstreams, extra ...exchange.Recorder) *envoyHost {
	t.Helper()
	fakesdk.InstallCAPI()
	_, js := loadMesh(t, up)
	h := &envoyHost{up: up, rec: newRecords(), count: newAdmissions(nil)}
	scheds := &process.Schedulers{}
	t.Cleanup(func() { scheds.Close() })
	h.plugin = envoyfilter.New(envoyfilter.Env{
		NewAdmitter: func(c *config.Config) (scheduler.Admitter, error) {
			a, err := scheds.NewAdmitter(c)
			if err != nil {
				return nil, err
			}
			h.count.mu.Lock()
			h.count.next = a
			h.count.mu.Unlock()
			return h.count, nil
		},
		Recorder: append(tee{envoyRecorder{h.rec}}, extra...),
	})
	var obj map[string]interface{}
	if err := json.Unmarshal([]byte(`{"listener": "main", "mesh": `+js+`}`), &obj); err != nil {
		t.Fatal(err)
	}
	st, err := structpb.NewStruct(obj)
	if err != nil {
		t.Fatal(err)
	}
	a, err := anypb.New(st)
	if err != nil {
		t.Fatal(err)
	}
	h.cfg, err = h.plugin.Parse(a, fakesdk.NewConfigCallbacks())
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	h.h1 = &http.Client{Timeout: 30 * time.Second}
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	h.h2c = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Protocols: &p}}
	t.Cleanup(func() { h.h1.CloseIdleConnections(); h.h2c.CloseIdleConnections() })
	return h
}

func (h *envoyHost) name() string          { return "envoy-fake" }
func (h *envoyHost) recs() *records        { return h.rec }
func (h *envoyHost) adm() admissionWatcher { return h.count }

// do drives one stream: decode phases, the upstream exchange, encode
// phases, then the stream's end as Envoy reports it.
func (h *envoyHost) do(t *testing.T, r request) response {
	t.Helper()
	// props are the stream's attributes; Envoy sets response.flags as the
	// stream ends.
	props := map[string]string{}
	s := fakesdk.NewStream(h.plugin.Factory, h.cfg, fakesdk.Options{Timeout: 20 * time.Second, Properties: props})
	defer func() {
		if v := s.Violations(); len(v) > 0 {
			t.Errorf("SDK rule violations:\n%s", strings.Join(v, "\n"))
		}
		if p := s.Panics(); len(p) > 0 {
			t.Errorf("panics reached the SDK:\n%s", strings.Join(p, "\n"))
		}
	}()
	reqH := fakesdk.RequestHeaders("POST", r.path, r.headers...)
	// A response that ends before its first bytes still releases a scenario
	// waiting for them, so that it fails instead of hanging.
	defer releaseStarted(&r)
	if r.queued != nil {
		// The client goes away while the filter holds the request.
		p := s.StartDecodeHeaders(reqH, false)
		r.queued()
		reset(s)
		if res := p.Wait(); !res.Destroyed {
			t.Errorf("envoy: held DecodeHeaders ended %+v, want destroyed", res)
		}
		return response{Cancelled: true}
	}
	res := s.DecodeHeaders(reqH, len(r.body) == 0)
	if (res.Status == api.Continue || res.Status == api.StopAndBuffer || res.Status == api.StopNoBuffer) && len(r.body) > 0 {
		res = s.DecodeData(r.body, true)
	}
	if res.Status == api.LocalReply {
		out := localReply(s.Reply(), r.grpc())
		s.Complete()
		return out
	}
	if res.Status != api.Continue {
		t.Fatalf("envoy: request phase ended %v", res.Status)
	}
	hdr := http.Header{}
	for k, vs := range reqH.Snapshot() {
		if !strings.HasPrefix(k, ":") {
			hdr[http.CanonicalHeaderKey(k)] = vs
		}
	}
	c, base := h.h1, h.up.http
	if r.grpc() {
		c, base = h.h2c, h.up.grpc
	}
	if o := s.UpstreamOverride(); o != nil {
		// Envoy's router sends the request to the override host.
		base = "http://" + o.Host
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+r.path, bytes.NewReader(s.Upstream()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = hdr
	up, err := c.Do(req)
	if err != nil {
		t.Fatalf("envoy: upstream: %v", err)
	}
	defer up.Body.Close()
	rh := fakesdk.ResponseHeaders(up.StatusCode)
	for k, vs := range up.Header {
		for _, v := range vs {
			rh.Add(strings.ToLower(k), v)
		}
	}
	if res := s.EncodeHeaders(rh, false); res.Status == api.LocalReply {
		out := localReply(s.Reply(), r.grpc())
		s.Complete()
		return out
	}
	snap := http.Header{}
	for k, vs := range rh.Snapshot() {
		snap[http.CanonicalHeaderKey(k)] = vs
	}
	out := response{Status: up.StatusCode, ContentType: snap.Get("Content-Type"), RetryAfter: snap.Get("Retry-After")}
	if v := snap.Get(":status"); v != "" {
		out.Status, _ = strconv.Atoi(v)
	}
	buf := make([]byte, 32<<10)
	reads := 0
	sent := 0
	for {
		n, rerr := up.Body.Read(buf)
		if n > 0 {
			reads++
			if res := s.EncodeData(buf[:n], false); res.Status == api.LocalReply {
				return h.endWithReply(s, out, r.grpc())
			}
			down := s.Downstream()
			out.Body = append(out.Body, down[sent:]...)
			sent = len(down)
			if reads == 1 {
				releaseStarted(&r)
			}
			if r.cancelAfter > 0 && reads >= r.cancelAfter {
				// The client went away and Envoy destroys the stream,
				// flagged as its connection manager does: an HTTP/1.1
				// client closes its connection (DC, downstream connection
				// termination), a gRPC client is on HTTP/2 and resets its
				// stream (DR, downstream remote reset).
				props["response.flags"] = strconv.Itoa(1 << 14)
				if r.grpc() {
					props["response.flags"] = strconv.Itoa(1 << 28)
				}
				out.Cancelled = true
				reset(s)
				return out
			}
		}
		if errors.Is(rerr, io.EOF) {
			break
		}
		if rerr != nil {
			// The upstream reset: Envoy's router flags the stream UR
			// (upstream remote reset), resets the downstream too and
			// destroys the stream.
			props["response.flags"] = "16"
			out.Reset = true
			reset(s)
			return out
		}
	}
	if len(up.Trailer) > 0 {
		tr := fakesdk.NewHeaders()
		for k, vs := range up.Trailer {
			for _, v := range vs {
				tr.Add(strings.ToLower(k), v)
			}
		}
		if res := s.EncodeTrailers(tr); res.Status == api.LocalReply {
			return h.endWithReply(s, out, r.grpc())
		}
		th := http.Header{}
		for k, vs := range tr.Snapshot() {
			th[http.CanonicalHeaderKey(k)] = vs
		}
		grpcTrailers(&out, snap, th)
	} else {
		if res := s.EncodeData(nil, true); res.Status == api.LocalReply {
			return h.endWithReply(s, out, r.grpc())
		}
		down := s.Downstream()
		out.Body = append(out.Body, down[sent:]...)
		grpcTrailers(&out, snap)
	}
	s.Complete()
	return out
}

// reset ends a stream that was reset (by the client or the upstream) as
// Envoy does: the stream is completed (OnStreamComplete, before the access
// logs), then its filters destroyed with Terminate.
func reset(s *fakesdk.Stream) {
	s.Filter().OnStreamComplete()
	s.Destroy(api.Terminate)
}

// endWithReply: the filter answered after the response started; Envoy
// resets the stream when headers had gone out.
func (h *envoyHost) endWithReply(s *fakesdk.Stream, sofar response, grpc bool) response {
	rep := s.Reply()
	if rep != nil && !rep.Reset {
		out := localReply(rep, grpc)
		s.Complete()
		return out
	}
	sofar.Reset = true
	s.Complete()
	return sofar
}

// localReply is what a client of Envoy receives for a filter's local reply
// before response headers. For gRPC Envoy sends a trailers-only response:
// HTTP 200, grpc-status the given code (or mapped from the HTTP status when
// none), grpc-message the body (source/common/http/utility.cc
// sendLocalReply; source/common/grpc/status.cc httpToGrpcStatus).
func localReply(r *fakesdk.LocalReply, grpc bool) response {
	if r == nil {
		return response{Reset: true}
	}
	hdr := http.Header{}
	for k, vs := range r.Headers {
		hdr[http.CanonicalHeaderKey(k)] = vs
	}
	out := response{Status: r.Code, ContentType: hdr.Get("Content-Type"), RetryAfter: hdr.Get("Retry-After")}
	if !grpc {
		if out.ContentType == "" && r.Body != "" {
			out.ContentType = "text/plain"
		}
		out.Body = []byte(r.Body)
		return out
	}
	out.Status = http.StatusOK
	out.ContentType = "application/grpc"
	code := r.GRPCStatus
	if code < 0 {
		code = fakesdk.HTTPToGRPCStatus(r.Code)
	}
	out.GRPCStatus = strconv.FormatInt(code, 10)
	out.GRPCMessage = r.Body
	out.Pushback = hdr.Get("Grpc-Retry-Pushback-Ms") != ""
	return out
}

func (r response) String() string {
	return fmt.Sprintf("%d %s grpc=%s %q body=%q reset=%v", r.Status, r.ContentType, r.GRPCStatus, r.GRPCMessage, r.Body, r.Reset)
}
