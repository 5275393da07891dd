package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/llmesh/llmesh/api/llmv1"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/testkit/wait"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// errAdmitter refuses every request with err.
type errAdmitter struct{ err error }

func (a errAdmitter) Admit(context.Context, scheduler.Request) (scheduler.Lease, error) {
	return nil, a.err
}

func TestAdmissionErrorMappingHTTPAndGRPC(t *testing.T) {
	up := httptest.NewServer(sseUpstream(1, 0))
	defer up.Close()
	gup := startGRPC(t, &genServer{n: 1})
	for _, tc := range []struct {
		err        error
		httpStatus int
		code       codes.Code
		pushback   bool
	}{
		// Queue full is retryable in both protocols (the core's reply table).
		{fmt.Errorf("%w: interactive at 256", scheduler.ErrQueueFull), 429, codes.ResourceExhausted, true},
		{fmt.Errorf("%w: max wait 10s passed", scheduler.ErrRejected), 503, codes.Unavailable, true},
		{fmt.Errorf("%w: dial: refused", scheduler.ErrUnavailable), 503, codes.Unavailable, true},
	} {
		t.Run(tc.err.Error(), func(t *testing.T) {
			_, gw := startGateway(t, Config{Pools: []Pool{{Name: "p", Upstream: up.URL}, {Name: "g", Protocol: GRPC, Upstream: gup}}},
				WithAdmitter(errAdmitter{tc.err}))
			res := post(t, context.Background(), gw+"/v1/completions", `{"prompt":"x","stream":true}`)
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != tc.httpStatus || res.Header.Get("Retry-After") != "1" || !strings.Contains(string(b), tc.err.Error()) {
				t.Errorf("HTTP: %d Retry-After=%q %s", res.StatusCode, res.Header.Get("Retry-After"), b)
			}
			var md metadata.MD
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			st, err := grpcClient(t, gw).Generate(ctx, &llmv1.GenerateRequest{Prompt: "x"}, grpc.Trailer(&md))
			if err == nil {
				_, err = st.Recv()
				md = st.Trailer()
			}
			if status.Code(err) != tc.code {
				t.Errorf("gRPC: %v, want %v", err, tc.code)
			}
			if got := len(md.Get("grpc-retry-pushback-ms")) == 1; got != tc.pushback {
				t.Errorf("gRPC pushback present=%v, want %v (%v)", got, tc.pushback, md)
			}
		})
	}
}

func TestClientCancelReleasesOnce(t *testing.T) {
	started := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 0; ; i++ {
			if _, err := io.WriteString(w, `data: {"choices":[{"text":"a"}]}`+"\n\n"); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			if i == 0 {
				close(started)
			}
			select {
			case <-r.Context().Done():
				return
			case <-time.After(time.Millisecond):
			}
		}
	}))
	defer up.Close()
	adm := &ctlAdmitter{}
	rec := newRecorder()
	_, gw := startGateway(t, Config{Pools: []Pool{{Name: "p", Upstream: up.URL}}}, WithAdmitter(adm), WithRecorder(rec))
	ctx, cancel := context.WithCancel(context.Background())
	res := post(t, ctx, gw+"/v1/completions", `{"prompt":"x","stream":true}`)
	<-started
	buf := make([]byte, 16)
	_, _ = res.Body.Read(buf)
	cancel()
	res.Body.Close()
	r := rec.next(t)
	if r.Outcome != scheduler.Cancelled {
		t.Errorf("outcome %v, want cancelled", r.Outcome)
	}
	_, released := adm.snapshot()
	if diff := cmp.Diff(map[scheduler.Outcome]int{scheduler.Cancelled: 1}, released); diff != "" {
		t.Errorf("releases (-want +got):\n%s", diff)
	}
}

func TestGracefulShutdownDrainsInFlight(t *testing.T) {
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, `data: {"choices":[{"text":"a"}]}`+"\n\n")
		w.(http.Flusher).Flush()
		<-release
		_, _ = io.WriteString(w, `data: {"choices":[{"text":"b"}]}`+"\n\ndata: [DONE]\n\n")
	}))
	defer up.Close()
	g, err := New(Config{Pools: []Pool{{Name: "p", Upstream: up.URL}}})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Serve(ctx, ln, 20*time.Second) }()
	base := "http://" + ln.Addr().String()
	res := post(t, context.Background(), base+"/v1/completions", `{"prompt":"x","stream":true}`)
	defer res.Body.Close()
	buf := make([]byte, 8)
	if _, err := res.Body.Read(buf); err != nil {
		t.Fatal(err)
	}
	cancel() // start draining with the stream in flight
	// New connections are refused once the listener is closed.
	wait.Until(t, "the listener to refuse connections after shutdown began", func() bool {
		c, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second)
		if err != nil {
			return true
		}
		c.Close()
		return false
	})
	close(release)
	rest, err := io.ReadAll(res.Body)
	if err != nil || !strings.Contains(string(rest), "[DONE]") {
		t.Fatalf("in-flight stream cut by shutdown: %q %v", rest, err)
	}
	if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
		t.Fatalf("Serve: %v", err)
	}
}

func TestHopByHopHeadersDropped(t *testing.T) {
	seen := make(chan http.Header, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Clone()
		w.Header().Set("Keep-Alive", "timeout=5")
		w.Header().Set("X-Engine", "sim")
		_, _ = io.WriteString(w, "{}")
	}))
	defer up.Close()
	_, gw := startGateway(t, Config{Pools: []Pool{{Name: "p", Upstream: up.URL}}})
	req := mustReq(context.Background(), gw+"/v1/completions", `{}`)
	req.Header.Set("Connection", "X-Secret")
	req.Header.Set("X-Secret", "1")
	req.Header.Set("Proxy-Authorization", "p")
	req.Header.Set("X-Keep", "yes")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	h := <-seen
	if h.Get("X-Secret") != "" || h.Get("Proxy-Authorization") != "" || h.Get("X-Keep") != "yes" {
		t.Errorf("upstream request headers %v", h)
	}
	if res.Header.Get("Keep-Alive") != "" || res.Header.Get("X-Engine") != "sim" {
		t.Errorf("response headers %v", res.Header)
	}
}

// panicAdmitter's lease panics when the host reports progress, so a panic
// happens in the middle of ReverseProxy's copy loop.
type panicAdmitter struct{ ctlAdmitter }

type panicLease struct{ *ctlLease }

func (p panicLease) Progress(scheduler.Progress) { panic("progress hook exploded") }

func (a *panicAdmitter) Admit(ctx context.Context, req scheduler.Request) (scheduler.Lease, error) {
	l, err := a.ctlAdmitter.Admit(ctx, req)
	return panicLease{l.(*ctlLease)}, err
}

func TestPanicMidStreamReleasesOnceAsFailed(t *testing.T) {
	up := httptest.NewServer(sseUpstream(3, 0))
	defer up.Close()
	adm := &panicAdmitter{}
	rec := newRecorder()
	_, gw := startGateway(t, Config{Pools: []Pool{{Name: "p", Upstream: up.URL}}}, WithAdmitter(adm), WithRecorder(rec))
	req := mustReq(context.Background(), gw+"/v1/completions", `{"prompt":"x","stream":true}`)
	if res, err := http.DefaultClient.Do(req); err == nil {
		_, _ = io.ReadAll(res.Body)
		res.Body.Close()
	}
	if r := rec.next(t); r.Outcome != scheduler.Failed {
		t.Errorf("outcome %v, want failed", r.Outcome)
	}
	_, released := adm.snapshot()
	if diff := cmp.Diff(map[scheduler.Outcome]int{scheduler.Failed: 1}, released); diff != "" {
		t.Errorf("releases (-want +got):\n%s", diff)
	}
}

// TestOutcomeFollowsObservation: the gateway releases a lease with the
// outcome the core derives from what it observed (exchange.OutcomeOf), as
// the Envoy host does: an engine's client error and a stream cut short
// without an error of the transport are failures, not done.
func TestOutcomeFollowsObservation(t *testing.T) {
	for _, tc := range []struct {
		name    string
		handler http.HandlerFunc
		want    scheduler.Outcome
	}{
		{"complete stream", sseUpstream(2, 0), scheduler.Done},
		{"engine 400", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, `{"error":{"message":"bad","type":"invalid_request_error","code":400}}`)
		}, scheduler.Failed},
		{"no [DONE]", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "data: {\"choices\":[{\"text\":\"a\"}]}\n\n")
		}, scheduler.Failed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := httptest.NewServer(tc.handler)
			defer up.Close()
			adm := &ctlAdmitter{}
			rec := newRecorder()
			_, gw := startGateway(t, Config{Pools: []Pool{{Name: "p", Upstream: up.URL}}}, WithAdmitter(adm), WithRecorder(rec))
			res, err := http.DefaultClient.Do(mustReq(context.Background(), gw+"/v1/completions", `{"prompt":"x","stream":true}`))
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.ReadAll(res.Body)
			res.Body.Close()
			if r := rec.next(t); r.Outcome != tc.want {
				t.Errorf("record outcome %v, want %v", r.Outcome, tc.want)
			}
			_, released := adm.snapshot()
			if diff := cmp.Diff(map[scheduler.Outcome]int{tc.want: 1}, released); diff != "" {
				t.Errorf("releases (-want +got):\n%s", diff)
			}
		})
	}
}
