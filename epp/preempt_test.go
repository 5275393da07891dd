package epp_test

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/llmesh/llmesh/epp"
	"github.com/llmesh/llmesh/epp/epptest"
	"github.com/llmesh/llmesh/exchange"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/testkit/wait"
)

// preemptable wraps the test scheduler's admissions so that a test can
// preempt a lease when it chooses, as the scheduler does: it closes the
// lease's preempt channel (and calls the notifier) and waits for the
// host's Release.
type preemptable struct {
	next scheduler.Admitter
	// preemptAt, when > 0, preempts the admission of that number (1 is
	// the first) before Admit returns it.
	preemptAt int

	mu     sync.Mutex
	leases []*ctlLease
	reqs   []scheduler.Request
	// notify: the leases offer OnPreempt (the in-process scheduler's do);
	// false tests the picker's watcher goroutine.
	notify bool
}

func (a *preemptable) Admit(ctx context.Context, req scheduler.Request) (scheduler.Lease, error) {
	l, err := a.next.Admit(ctx, req)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.reqs = append(a.reqs, req)
	if err != nil {
		return nil, err
	}
	cl := &ctlLease{Lease: l, ch: make(chan struct{}), released: make(chan scheduler.Outcome, 1)}
	a.leases = append(a.leases, cl)
	if len(a.leases) == a.preemptAt {
		cl.preempt()
	}
	if a.notify {
		return &notifyLease{cl}, nil
	}
	return cl, nil
}

func (a *preemptable) lease(i int) *ctlLease {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.leases[i]
}

// ctlLease is a lease whose preemption the test controls.
type ctlLease struct {
	scheduler.Lease
	ch       chan struct{}
	once     sync.Once
	mu       sync.Mutex
	f        func()
	released chan scheduler.Outcome
}

func (l *ctlLease) Preempt() <-chan struct{} { return l.ch }
func (l *ctlLease) Endpoint() string         { return scheduler.EndpointOf(l.Lease) }
func (l *ctlLease) Release(o scheduler.Outcome) {
	l.Lease.Release(o)
	l.released <- o
}

func (l *ctlLease) preempt() {
	l.once.Do(func() {
		close(l.ch)
		l.mu.Lock()
		f := l.f
		l.mu.Unlock()
		if f != nil {
			f()
		}
	})
}

// notifyLease is a ctlLease that tells of its preemption by a callback.
type notifyLease struct{ *ctlLease }

func (l *notifyLease) OnPreempt(f func()) {
	l.mu.Lock()
	select {
	case <-l.ch:
		l.mu.Unlock()
		f()
		return
	default:
	}
	l.f = f
	l.mu.Unlock()
}

var (
	_ scheduler.PreemptNotifier = (*notifyLease)(nil)
	_ scheduler.Routed          = (*ctlLease)(nil)
)

func (l *ctlLease) outcome(t *testing.T) scheduler.Outcome {
	t.Helper()
	select {
	case o := <-l.released:
		return o
	case <-ctx(t).Done():
		t.Fatal("lease not released")
	}
	return 0
}

func startPreemptable(t *testing.T, a *preemptable) *picker {
	return startPreemptableMesh(t, "testdata/mesh.yaml", a)
}

func startPreemptableMesh(t *testing.T, mesh string, a *preemptable) *picker {
	return startPickerMesh(t, mesh, func(c *epp.Config) {
		a.next = c.Admitter
		c.Admitter = a
	})
}

// grpcMesh is a mesh of one gRPC pool, written for the test.
func grpcMesh(t *testing.T) string {
	path := filepath.Join(t.TempDir(), "mesh.yaml")
	mesh := `pools:
  - name: llm
    protocol: grpc
    endpoints: [10.0.0.1:9000]
    capacity: {max_inflight: 2}
classes: [{name: interactive, priority: 0}]
`
	if err := os.WriteFile(path, []byte(mesh), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Preempted between its admission and its pick, the request goes back to
// the queue (Request.Requeue, its arrival kept) and is picked on its next
// admission; the client sees only the delay.
func TestPreemptBeforePickRequeues(t *testing.T) {
	a := &preemptable{preemptAt: 1, notify: true}
	p := startPreemptable(t, a)
	call, pick, err := p.driver(epptest.FullDuplex).Start(ctx(t), chat(nil))
	if err != nil || pick.Immediate != nil {
		t.Fatalf("%v %v", err, pick.Immediate)
	}
	if o := a.lease(0).outcome(t); o != scheduler.Preempted {
		t.Fatalf("first lease released %v, want preempted", o)
	}
	a.mu.Lock()
	reqs := a.reqs
	a.mu.Unlock()
	if len(reqs) != 2 || reqs[0].Requeue || !reqs[1].Requeue || !reqs[1].Arrival.Equal(reqs[0].Arrival) || reqs[1].ID != reqs[0].ID {
		t.Fatalf("admissions %+v: want the request again with Requeue, same ID and arrival", reqs)
	}
	if string(pick.Body) != chatBody || pick.Header == "" {
		t.Fatalf("pick %+v", pick)
	}
	if _, err := call.Respond(epptest.Response{Status: 200, Headers: map[string]string{"content-type": "text/event-stream"},
		Chunks: [][]byte{[]byte(sse(2))}}); err != nil {
		t.Fatal(err)
	}
	r := p.record(t)
	if r.Outcome != scheduler.Done || r.Preemptions != 1 || r.Observation.OutputTokens != 2 {
		t.Fatalf("record: outcome %v, preemptions %d, tokens %d", r.Outcome, r.Preemptions, r.Observation.OutputTokens)
	}
	if o := a.lease(1).outcome(t); o != scheduler.Done {
		t.Fatalf("second lease released %v", o)
	}
}

// Preempted after the pick went out and before the response's first
// byte: the picker answers at once, without waiting for Envoy's next
// message, with the retryable reply (503 llmesh_preempted, retry-after;
// for gRPC grpc-retry-pushback-ms),
// as the Envoy filter host does; for gRPC the immediate response carries
// UNAVAILABLE. The lease is released as preempted.
func TestPreemptBeforeFirstByte(t *testing.T) {
	for _, notify := range []bool{true, false} {
		for _, grpc := range []bool{false, true} {
			name := map[bool]string{true: "notify", false: "watch"}[notify] + map[bool]string{true: "/grpc", false: "/http"}[grpc]
			t.Run(name, func(t *testing.T) {
				a := &preemptable{notify: notify}
				mesh := "testdata/mesh.yaml"
				if grpc {
					mesh = grpcMesh(t)
				}
				p := startPreemptableMesh(t, mesh, a)
				req := chat(nil)
				if grpc {
					req = epptest.Request{Headers: map[string]string{":method": "POST", ":path": "/llm.v1.Generation/Generate",
						"content-type": "application/grpc"}, Chunks: [][]byte{{0, 0, 0, 0, 0}}}
				}
				call, pick, err := p.driver(epptest.FullDuplex).Start(ctx(t), req)
				if err != nil || pick.Immediate != nil {
					t.Fatalf("%v %v", err, pick.Immediate)
				}
				a.lease(0).preempt()
				m, err := call.Recv()
				if err != nil {
					t.Fatal(err)
				}
				im := m.GetImmediateResponse()
				if im == nil || im.GetStatus().GetCode() != 503 || im.GetDetails() != "llmesh_preempted" {
					t.Fatalf("want an immediate 503 llmesh_preempted, got %v", m)
				}
				if grpc != (im.GetGrpcStatus() != nil) || (grpc && im.GetGrpcStatus().GetStatus() != 14) {
					t.Fatalf("grpc status %v", im.GetGrpcStatus())
				}
				var retry bool
				for _, h := range im.GetHeaders().GetSetHeaders() {
					// Envoy's retry hints, as the filter host gives them.
					retry = retry || h.GetHeader().GetKey() == map[bool]string{false: "retry-after", true: "grpc-retry-pushback-ms"}[grpc]
				}
				if !retry {
					t.Fatal("no retry hint")
				}
				if grpc && string(im.GetBody()) != scheduler.ErrPreempted.Error() {
					t.Fatalf("gRPC reply body %q, want the message (Envoy's grpc-message)", im.GetBody())
				}
				if o := a.lease(0).outcome(t); o != scheduler.Preempted {
					t.Fatalf("released %v", o)
				}
				r := p.record(t)
				if r.Outcome != scheduler.Preempted || r.Preemptions != 1 || r.Status != 503 || r.Observation.ErrorKind != exchange.ErrorPreempted {
					t.Fatalf("record %+v", r)
				}
				// Envoy answers nothing more and closes the stream.
				call.Cancel()
				wait.Until(t, "the slot freed", func() bool { return p.stats().InFlight == 0 })
				if n := epp.PreemptedCount(p.srv); n != 1 {
					t.Fatalf("preempted count %d", n)
				}
			})
		}
	}
}

// Preempted after the first byte of an event stream whose body the picker
// streams (full duplex): the picker ends the client's body itself with an
// OpenAI error event, after completing an event cut mid-way, as the
// gateway ends a stream it cannot continue; Envoy ends the response there
// and resets the upstream. In the other response modes the picker does
// not own the body and sends an immediate response, which Envoy turns
// into a reset of the client's stream (as the Envoy filter host's local
// reply after response headers).
func TestPreemptMidStream(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			a := &preemptable{notify: true}
			p := startPreemptable(t, a)
			call, pick, err := p.driver(m.mode).Start(ctx(t), chat(nil))
			if err != nil || pick.Immediate != nil {
				t.Fatalf("%v %v", err, pick.Immediate)
			}
			events := sse(4)
			// The second chunk ends mid-event; the preemption comes while
			// the upstream is between the second and the third.
			cut := strings.Index(events, "\n\n") + 2 + 10
			body := &scriptedBody{pieces: []string{events[:cut], events[cut : cut+5], events[cut+5:]},
				before: map[int]func(){2: func() {
					a.lease(0).preempt()
					wait.Until(t, "the lease released", func() bool { return p.stats().InFlight == 0 })
				}}}
			rep, err := call.Relay(epptest.Response{Status: 200, Headers: map[string]string{"content-type": "text/event-stream"}, Body: body})
			if err != nil {
				t.Fatal(err)
			}
			if !rep.HeadersSent {
				t.Fatal("response headers not sent")
			}
			if m.mode == epptest.FullDuplex {
				want := events[:cut+5] + "\n\nevent: error\ndata: "
				if !rep.EndedByPicker || rep.Immediate != nil || !strings.HasPrefix(string(rep.Body), want) ||
					!strings.Contains(string(rep.Body), `"type":"preempted"`) || !strings.HasSuffix(string(rep.Body), "}}\n\n") {
					t.Fatalf("ended %v, immediate %v, client body %q", rep.EndedByPicker, rep.Immediate, rep.Body)
				}
			} else if rep.Immediate == nil || rep.Immediate.GetDetails() != "llmesh_preempted" {
				t.Fatalf("want an immediate response (a reset for the client), got %+v", rep)
			}
			if !body.closed {
				t.Fatal("the upstream's body was not closed")
			}
			r := p.record(t)
			if r.Outcome != scheduler.Preempted || r.Preemptions != 1 || r.Observation.ErrorKind != exchange.ErrorPreempted ||
				r.Observation.OutputTokens != 1 {
				t.Fatalf("record: outcome %v, preemptions %d, error %v, tokens %d", r.Outcome, r.Preemptions,
					r.Observation.ErrorKind, r.Observation.OutputTokens)
			}
		})
	}
}

// A preemption that comes after the response ended changes nothing, and
// a lease of a finished request is never released twice.
func TestPreemptAfterEnd(t *testing.T) {
	a := &preemptable{notify: true}
	p := startPreemptable(t, a)
	call, _, err := p.driver(epptest.FullDuplex).Start(ctx(t), chat(nil))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := call.Respond(epptest.Response{Status: 200, Headers: map[string]string{"content-type": "text/event-stream"},
		Chunks: [][]byte{[]byte(sse(2))}}); err != nil {
		t.Fatal(err)
	}
	if o := a.lease(0).outcome(t); o != scheduler.Done {
		t.Fatalf("released %v", o)
	}
	a.lease(0).preempt()
	if r := p.record(t); r.Outcome != scheduler.Done || r.Preemptions != 0 {
		t.Fatalf("record %+v", r)
	}
	select {
	case o := <-a.lease(0).released:
		t.Fatalf("released again: %v", o)
	default:
	}
	if n := epp.PreemptedCount(p.srv); n != 0 {
		t.Fatalf("preempted count %d", n)
	}
}

// scriptedBody is an upstream body read in fixed pieces; before[i] runs
// before piece i is returned.
type scriptedBody struct {
	pieces []string
	before map[int]func()
	i      int
	closed bool
}

func (b *scriptedBody) Read(p []byte) (int, error) {
	if b.i >= len(b.pieces) {
		return 0, io.EOF
	}
	if f := b.before[b.i]; f != nil {
		f()
	}
	n := copy(p, b.pieces[b.i])
	b.i++
	return n, nil
}

func (b *scriptedBody) Close() error { b.closed = true; return nil }
