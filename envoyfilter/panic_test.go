package envoyfilter

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/envoyproxy/envoy/contrib/golang/common/go/api"

	"github.com/llmesh/llmesh/api/llmv1"
	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/exchange"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/testkit/fakesdk"
	"github.com/llmesh/llmesh/testkit/grpcframe"
)

// panicAdmitter panics in Admit, or admits with a lease whose Progress
// panics.
type panicAdmitter struct{ inAdmit bool }

func (p panicAdmitter) Admit(ctx context.Context, req scheduler.Request) (scheduler.Lease, error) {
	if p.inAdmit {
		panic("admit exploded")
	}
	return &panicLease{preempt: make(chan struct{})}, nil
}

type panicLease struct{ preempt chan struct{} }

func (l *panicLease) Preempt() <-chan struct{}    { return l.preempt }
func (l *panicLease) Progress(scheduler.Progress) { panic("progress exploded") }
func (l *panicLease) Release(scheduler.Outcome)   {}
func (l *panicLease) QueueTime() time.Duration    { return 0 }

type panicRecorder struct{}

func (panicRecorder) Record(exchange.Record) { panic("recorder exploded") }

// TestPanicRecovery: panics in the admission goroutine, in a data
// callback and after the stream never reach the SDK's recovery (whose 500
// carries grpc-status 0, i.e. success, to gRPC clients); gRPC clients get
// INTERNAL instead.
func TestPanicRecovery(t *testing.T) {
	withAdmitter := func(a scheduler.Admitter) func(*Env) {
		return func(e *Env) {
			e.NewAdmitter = func(*config.Config) (scheduler.Admitter, error) { return a, nil }
			e.Recorder = panicRecorder{}
		}
	}
	settings := `{"mesh": ` + testMesh("fifo", "") + `}`

	t.Run("admit", func(t *testing.T) {
		h := newHarness(t, settings, false, withAdmitter(panicAdmitter{inAdmit: true}))
		s := h.stream(fakesdk.Options{})
		r := s.DecodeHeaders(grpcRequest(), true)
		wantStatus(t, "DecodeHeaders", r, api.LocalReply)
		rep := s.Reply()
		if rep.Panic {
			t.Fatal("the panic reached the SDK's recovery")
		}
		want(t, "grpc status", rep.GRPCStatus, 13)
		s.Complete()
		noViolations(t, s)
		want(t, StatPanics, h.counter(StatPanics), 2) // Admit and the recorder
	})

	t.Run("encode data", func(t *testing.T) {
		h := newHarness(t, settings, false, withAdmitter(panicAdmitter{}))
		s := h.stream(fakesdk.Options{})
		wantStatus(t, "DecodeHeaders", s.DecodeHeaders(grpcRequest(), true), api.Continue)
		wantStatus(t, "EncodeHeaders", s.EncodeHeaders(fakesdk.ResponseHeaders(200, "content-type", "application/grpc"), false), api.Continue)
		r := s.EncodeData(grpcframe.Message(&llmv1.GenerateResponse{TokenIds: []uint32{1}}), false)
		wantStatus(t, "EncodeData", r, api.LocalReply)
		rep := s.Reply()
		want(t, "grpc status", rep.GRPCStatus, 13)
		if rep.Panic || !rep.Reset {
			t.Errorf("reply %+v: want our own reply, as a reset after headers", rep)
		}
		s.Complete()
		noViolations(t, s)
		if n := h.counter(StatPanics); n != 2 {
			t.Errorf("%s = %d, want 2 (EncodeData and the recorder)", StatPanics, n)
		}
		if len(fakesdk.InstallCAPI().Lines("progress exploded")) == 0 {
			t.Error("the panic was not logged")
		}
	})
}

// TestSDKPanicReplyIsGRPCOK documents why the adapter recovers its own
// panics: the fake reproduces Envoy's panic reply, 500 with gRPC status 0.
func TestSDKPanicReplyIsGRPCOK(t *testing.T) {
	boom := func(interface{}, api.FilterCallbackHandler) api.StreamFilter { return &boomFilter{} }
	s := fakesdk.NewStream(boom, nil, fakesdk.Options{})
	s.DecodeHeaders(grpcRequest(), true)
	rep := s.Reply()
	if rep == nil || !rep.Panic || rep.GRPCStatus != 0 || rep.Code != 500 {
		t.Fatalf("reply %+v, want the SDK's panic reply (500, grpc-status 0)", rep)
	}
	if p := s.Panics(); len(p) != 1 || !strings.Contains(p[0], "boom") {
		t.Errorf("panics %q", p)
	}
}

type boomFilter struct{ api.PassThroughStreamFilter }

func (*boomFilter) DecodeHeaders(api.RequestHeaderMap, bool) api.StatusType { panic("boom") }
