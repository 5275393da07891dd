package client_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/llmesh/llmesh/api/schedulerv1"
	"github.com/llmesh/llmesh/clock"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/client"
	"github.com/llmesh/llmesh/scheduler/framed"
	"github.com/llmesh/llmesh/scheduler/policy/fifo"
	"github.com/llmesh/llmesh/scheduler/policy/preemptive"
	"github.com/llmesh/llmesh/scheduler/server"
	"github.com/llmesh/llmesh/testkit/schedtest"
	"github.com/llmesh/llmesh/testkit/wait"
)

// The wire tests again over one Admit stream per admission, the path the
// client takes for a service without Session.
func TestPerAdmissionStreams(t *testing.T) {
	perAdmission = true
	defer func() { perAdmission = false }()
	for _, tc := range []struct {
		name string
		f    func(*testing.T)
	}{
		{"share", TestTwoClientsShareOneCapacity}, {"dead", TestDeadClientFreesSlots},
		{"preempt", TestPreemptOverTheWire}, {"rejections", TestRejectionsAndCancel},
		{"restart", TestServiceRestart}, {"endpoint", TestLeaseEndpointOverTheWire},
	} {
		t.Run(tc.name, tc.f)
	}
}

// The wire tests again over the framed transport: the same sessions over
// plain TCP, served on the same address as gRPC.
func TestFramedTransport(t *testing.T) {
	transport = client.TransportFramed
	defer func() { transport = client.TransportGRPC }()
	for _, tc := range []struct {
		name string
		f    func(*testing.T)
	}{
		{"share", TestTwoClientsShareOneCapacity}, {"dead", TestDeadClientFreesSlots},
		{"preempt", TestPreemptOverTheWire}, {"rejections", TestRejectionsAndCancel},
		{"restart", TestServiceRestart}, {"endpoint", TestLeaseEndpointOverTheWire},
		{"failure", TestFailureModes}, {"multiplex", TestSessionMultiplexesLeases},
		{"preempt-lease", TestSessionPreemptReachesItsLease}, {"withdraw", TestSessionWithdraw},
		{"open-context", TestSessionOpenHonoursContext},
	} {
		t.Run(tc.name, tc.f)
	}
}

// A framed client talks to the service without any gRPC stream.
func TestFramedUsesNoGRPCStream(t *testing.T) {
	cs, sched, addr := startCounting(t, config(2, fifo.New()), false)
	c := newClient(t, addr, client.Options{Transport: client.TransportFramed})
	admitAndRelease(t, c, sched, 5, 5)
	if a, s, g := cs.admits.Load(), cs.sessions.Load(), cs.grpcSessions.Load(); a != 0 || s != 1 || g != 0 {
		t.Fatalf("%d Admit streams, %d sessions (%d over gRPC), want 0, 1 framed", a, s, g)
	}
}

// A service older than the framed transport (gRPC only) closes the
// connection at the preface: framed admissions fail over per the failure
// mode, with an error that says why.
func TestFramedAgainstGRPCOnlyService(t *testing.T) {
	_, _, addr := startGRPCOnly(t, config(2, fifo.New()))
	c := newClient(t, addr, client.Options{Transport: client.TransportFramed})
	_, err := c.Admit(context.Background(), scheduler.Request{Class: "interactive"})
	if !errors.Is(err, scheduler.ErrUnavailable) || !strings.Contains(err.Error(), "transport grpc") {
		t.Fatalf("Admit: %v, want ErrUnavailable naming the gRPC transport", err)
	}
}

// The default transport, auto: framed with a service that speaks it, gRPC
// with one that does not.
func TestAutoTransport(t *testing.T) {
	cs, sched, addr := startCounting(t, config(2, fifo.New()), false)
	c := newClient(t, addr, client.Options{Transport: client.TransportAuto})
	admitAndRelease(t, c, sched, 1, 1)
	if s, g := cs.sessions.Load(), cs.grpcSessions.Load(); s != 1 || g != 0 {
		t.Fatalf("auto with a framed service: %d sessions, %d over gRPC; want 1 framed", s, g)
	}
	if tr := c.SessionTransport(); tr != client.TransportFramed {
		t.Fatalf("SessionTransport %q with a framed service, want framed", tr)
	}

	oc, old, oldAddr := startGRPCOnly(t, config(2, fifo.New()))
	c2 := newClient(t, oldAddr, client.Options{Transport: client.TransportAuto})
	admitAndRelease(t, c2, old, 3, 3)
	if g := oc.grpcSessions.Load(); g != 1 {
		t.Fatalf("auto with a gRPC-only service: %d gRPC sessions, want 1", g)
	}
	if tr := c2.SessionTransport(); tr != client.TransportGRPC {
		t.Fatalf("SessionTransport %q with a gRPC-only service, want grpc", tr)
	}
}

func TestTransportOption(t *testing.T) {
	if _, err := client.New("127.0.0.1:1", client.Options{Transport: "quic"}); err == nil || !strings.Contains(err.Error(), `transport "quic"`) {
		t.Fatalf("unknown transport: %v", err)
	}
	if _, err := client.New("127.0.0.1:1", client.Options{Transport: client.TransportFramed, StreamPerAdmission: true}); err == nil {
		t.Fatal("framed with a stream per admission: no error")
	}
}

// admitAndRelease admits n interactive requests through c one after the
// other, releasing each as done, and waits until sched has counted done
// requests in all.
func admitAndRelease(t *testing.T, c *client.Client, sched *scheduler.Scheduler, n int, done uint64) {
	t.Helper()
	for i := 0; i < n; i++ {
		l, err := c.Admit(context.Background(), scheduler.Request{Class: "interactive"})
		if err != nil {
			t.Fatalf("admission %d: %v", i, err)
		}
		l.Release(scheduler.Done)
	}
	wait.Until(t, "released", func() bool { return sched.Stats()[0].Done == done })
}

// countingService serves the scheduler and counts the streams of each
// method and the Session messages received, so a test can tell how a
// client talks to it.
type countingService struct {
	*server.Server
	admits, sessions atomic.Int64 // sessions: over either transport
	grpcSessions     atomic.Int64
	noSession        bool // answer Session with Unimplemented, as older services do

	mu       sync.Mutex
	received [][]string // per Session message received: its leases' messages ("1:start", "1:done")
}

// messages is what the service received so far, one entry per message.
func (c *countingService) messages() [][]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.received)
}

// countingStream records each message the service receives.
type countingStream struct {
	schedulerv1.Scheduler_SessionServer
	c *countingService
}

// RecvMsg is what the service receives with; m is its own type, a
// proto.Message decoded by gRPC's codec (the test server has no other).
func (s countingStream) RecvMsg(into any) error {
	err := s.Scheduler_SessionServer.RecvMsg(into)
	if err == nil {
		b, err := proto.Marshal(into.(proto.Message))
		if err != nil {
			return err
		}
		m := &schedulerv1.SessionRequest{}
		if err := proto.Unmarshal(b, m); err != nil {
			return err
		}
		var msg []string
		for _, r := range m.GetLeases() {
			kind := "?"
			switch r.GetMsg().(type) {
			case *schedulerv1.LeaseRequest_Start:
				kind = "start"
			case *schedulerv1.LeaseRequest_Progress:
				kind = "progress"
			case *schedulerv1.LeaseRequest_Done:
				kind = "done"
			}
			msg = append(msg, fmt.Sprintf("%d:%s", r.GetLease(), kind))
		}
		s.c.mu.Lock()
		s.c.received = append(s.c.received, msg)
		s.c.mu.Unlock()
	}
	return err
}

func (c *countingService) Admit(s schedulerv1.Scheduler_AdmitServer) error {
	c.admits.Add(1)
	return c.Server.Admit(s)
}

func (c *countingService) Session(s schedulerv1.Scheduler_SessionServer) error {
	c.sessions.Add(1)
	c.grpcSessions.Add(1)
	if c.noSession {
		return status.Error(codes.Unimplemented, "method Session not implemented")
	}
	return c.Server.Session(countingStream{s, c})
}

// startGRPCOnly is startCounting for a service older than the framed
// transport: gRPC on its address, nothing else.
func startGRPCOnly(t *testing.T, cfg scheduler.Config) (*countingService, *scheduler.Scheduler, string) {
	t.Helper()
	return serveCounting(t, cfg, false, false)
}

func startCounting(t *testing.T, cfg scheduler.Config, noSession bool) (*countingService, *scheduler.Scheduler, string) {
	t.Helper()
	return serveCounting(t, cfg, noSession, true)
}

// serveCounting serves a counting service on a loopback port: gRPC, and
// framed sessions on the same address when framedToo.
func serveCounting(t *testing.T, cfg scheduler.Config, noSession, framedToo bool) (*countingService, *scheduler.Scheduler, string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sched, err := scheduler.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs := &countingService{Server: server.New(sched, nil), noSession: noSession}
	g := grpc.NewServer()
	schedulerv1.RegisterSchedulerServer(g, cs)
	mux := framed.NewMux(l, net.KeepAliveConfig{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		if !framedToo {
			_ = g.Serve(l)
			return
		}
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = mux.Serve(context.Background(), func(c *framed.ServerConn) error {
				cs.sessions.Add(1)
				return cs.Server.ServeSession(c)
			})
		}()
		_ = g.Serve(mux.Other())
		mux.Close()
		wg.Wait()
	}()
	t.Cleanup(func() {
		g.Stop()
		mux.Close()
		<-done
		sched.Close()
	})
	return cs, sched, l.Addr().String()
}

// Many concurrent admissions of one proxy share one Session stream; the
// pool's limit holds across them, and every lease is released once.
func TestSessionMultiplexesLeases(t *testing.T) {
	const limit, n = 4, 200
	cs, sched, addr := startCounting(t, config(limit, fifo.New()), false)
	c := newClient(t, addr, client.Options{})
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := c.Admit(context.Background(), scheduler.Request{Class: "interactive", PromptTokens: 10, MaxTokens: 10})
			if err != nil {
				t.Error(err)
				return
			}
			if got := sched.Stats()[0].InFlight; got > limit {
				t.Errorf("%d in flight, limit %d", got, limit)
			}
			l.Progress(scheduler.Progress{FirstToken: true, Tokens: 1})
			l.Progress(scheduler.Progress{FirstToken: true, Tokens: 2})
			l.Release(scheduler.Done)
			l.Release(scheduler.Failed) // ignored
		}()
	}
	wg.Wait()
	wait.Until(t, "all released", func() bool { return sched.Stats()[0].InFlight == 0 })
	st := sched.Stats()[0]
	if st.Admitted != n || st.Done != n || st.Failed != 0 {
		t.Fatalf("counters %+v, want %d admitted and done, none failed", st.Counters, n)
	}
	if a, s := cs.admits.Load(), cs.sessions.Load(); a != 0 || s != 1 {
		t.Fatalf("%d Admit streams and %d sessions for %d admissions, want 0 and 1", a, s, n)
	}
}

// A preemption reaches the lease it was meant for, not the other leases
// of the same session.
func TestSessionPreemptReachesItsLease(t *testing.T) {
	_, sched, addr := startCounting(t, config(2, preemptive.New()), false)
	a := newClient(t, addr, client.Options{})
	b := newClient(t, addr, client.Options{})
	ctx := context.Background()
	old, err := a.Admit(ctx, scheduler.Request{ID: "old", Class: "batch", MaxTokens: 1000})
	if err != nil {
		t.Fatal(err)
	}
	old.Progress(scheduler.Progress{FirstToken: true, Tokens: 50})
	young, err := a.Admit(ctx, scheduler.Request{ID: "young", Class: "batch", MaxTokens: 1000})
	if err != nil {
		t.Fatal(err)
	}
	// The victim order takes the one without a first token: young.
	hi := schedtest.Admit(ctx, b, scheduler.Request{ID: "urgent", Class: "interactive"})
	select {
	case <-young.Preempt():
	case <-old.Preempt():
		t.Fatal("the preemption reached the other lease of the session")
	case <-time.After(10 * time.Second):
		t.Fatal("no preemption reached the client")
	}
	young.Release(scheduler.Preempted)
	r := <-hi
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	select {
	case <-old.Preempt():
		t.Fatal("the other lease was preempted too")
	default:
	}
	r.Lease.Release(scheduler.Done)
	old.Release(scheduler.Done)
	wait.Until(t, "released", func() bool { return sched.Stats()[0].InFlight == 0 })
	if st := sched.Stats()[0]; st.Preempted != 1 || st.Done != 2 {
		t.Fatalf("counters %+v", st.Counters)
	}
}

// Withdrawing a waiting request (its context ends) takes it out of the
// service's queue while the session's other leases go on.
func TestSessionWithdraw(t *testing.T) {
	_, sched, addr := startCounting(t, config(1, fifo.New()), false)
	c := newClient(t, addr, client.Options{})
	ctx := context.Background()
	held, err := c.Admit(ctx, scheduler.Request{Class: "interactive"})
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	w := schedtest.Admit(cctx, c, scheduler.Request{Class: "interactive"})
	wait.Until(t, "queued", func() bool { return sched.Stats()[0].Queued["interactive"] == 1 })
	cancel()
	if r := <-w; !errors.Is(r.Err, scheduler.ErrCancelled) {
		t.Fatalf("withdrawn: %v, want ErrCancelled", r.Err)
	}
	wait.Until(t, "queue emptied", func() bool { return sched.Stats()[0].Queued["interactive"] == 0 })
	held.Release(scheduler.Done)
	l, err := c.Admit(ctx, scheduler.Request{Class: "interactive"})
	if err != nil {
		t.Fatal(err)
	}
	l.Release(scheduler.Done)
	wait.Until(t, "released", func() bool { return sched.Stats()[0].InFlight == 0 })
	if st := sched.Stats()[0]; st.Admitted != 2 || st.Cancelled != 1 {
		t.Fatalf("counters %+v, want 2 admitted, the withdrawn one cancelled", st.Counters)
	}
}

// A service without Session: the client falls back to Admit streams and
// stays there.
func TestSessionFallbackToAdmitStreams(t *testing.T) {
	cs, sched, addr := startCounting(t, config(2, fifo.New()), true)
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	c := newClient(t, addr, client.Options{Clock: clk})
	admitAndRelease(t, c, sched, 3, 3)
	if a, s := cs.admits.Load(), cs.sessions.Load(); a != 3 || s != 1 {
		t.Fatalf("%d Admit streams and %d Session attempts, want 3 and 1", a, s)
	}
	// A minute later the client tries Session again (a service upgraded in
	// place), finds none, and falls back once more.
	clk.Advance(time.Minute)
	admitAndRelease(t, c, sched, 1, 4)
	if a, s := cs.admits.Load(), cs.sessions.Load(); a != 4 || s != 2 {
		t.Fatalf("after a minute: %d Admit streams and %d Session attempts, want 4 and 2", a, s)
	}
}

// A request whose context ends while the session is still opening (the
// service accepts TCP but never answers the HTTP/2 handshake) returns
// ErrCancelled when its context ends, not when the connect timeout does.
func TestSessionOpenHonoursContext(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var conns []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c) // held open, never answered
			mu.Unlock()
		}
	}()
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	}()
	c := newClient(t, l.Addr().String(), client.Options{Timeout: 20 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	begin := time.Now()
	_, err = c.Admit(ctx, scheduler.Request{})
	if !errors.Is(err, scheduler.ErrCancelled) {
		t.Fatalf("Admit: %v, want ErrCancelled", err)
	}
	if d := time.Since(begin); d > 10*time.Second {
		t.Fatalf("Admit returned after %v, its context ended after 200ms", d)
	}
}

// A lease's Progress and Release wait for the session's next message: the
// next Admit's Start carries them, so a busy proxy sends one message per
// admission. With the fake clock never advanced the sender's delay never
// ends, so only the Start can have carried them.
func TestSessionReportsRideWithTheNextStart(t *testing.T) {
	cs, sched, addr := startCounting(t, config(4, fifo.New()), false)
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	c := newClient(t, addr, client.Options{Clock: clk, ReportDelay: time.Millisecond})
	ctx := context.Background()
	a, err := c.Admit(ctx, scheduler.Request{Class: "interactive"})
	if err != nil {
		t.Fatal(err)
	}
	a.Progress(scheduler.Progress{FirstToken: true, Tokens: 1})
	a.Release(scheduler.Done)
	b, err := c.Admit(ctx, scheduler.Request{Class: "interactive"})
	if err != nil {
		t.Fatal(err)
	}
	want := [][]string{{"1:start"}, {"2:start", "1:progress", "1:done"}}
	if diff := cmp.Diff(want, cs.messages()); diff != "" {
		t.Fatalf("messages received (-want +got):\n%s", diff)
	}
	wait.Until(t, "the first released", func() bool { return sched.Stats()[0].Done == 1 })
	if st := sched.Stats()[0]; st.InFlight != 1 {
		t.Fatalf("counters %+v, in flight %d: want the second admitted, the first released", st.Counters, st.InFlight)
	}
	// Nothing comes next: once the delay has passed the sender sends the
	// release alone.
	b.Release(scheduler.Done)
	wait.Until(t, "the sender's delay", func() bool { return clk.Timers() > 0 })
	clk.Advance(time.Millisecond)
	wait.Until(t, "released", func() bool { return sched.Stats()[0].Done == 2 })
	want = append(want, []string{"2:done"})
	if diff := cmp.Diff(want, cs.messages()); diff != "" {
		t.Fatalf("messages received (-want +got):\n%s", diff)
	}
}

// With a negative ReportDelay every report leaves at once, in a message
// of its own (no clock advanced, no Start to ride with).
func TestSessionReportsAtOnce(t *testing.T) {
	cs, sched, addr := startCounting(t, config(4, fifo.New()), false)
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	c := newClient(t, addr, client.Options{Clock: clk, ReportDelay: -1})
	a, err := c.Admit(context.Background(), scheduler.Request{Class: "interactive"})
	if err != nil {
		t.Fatal(err)
	}
	a.Release(scheduler.Done)
	wait.Until(t, "released", func() bool { return sched.Stats()[0].Done == 1 })
	if diff := cmp.Diff([][]string{{"1:start"}, {"1:done"}}, cs.messages()); diff != "" {
		t.Fatalf("messages received (-want +got):\n%s", diff)
	}
}

// Close sends the reports still waiting for the delay before it ends the
// session, so the service counts a release as done, not cancelled.
func TestSessionCloseSendsWaitingReports(t *testing.T) {
	_, sched, addr := startCounting(t, config(4, fifo.New()), false)
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	c, err := client.New(addr, client.Options{Clock: clk, ReportDelay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	l, err := c.Admit(context.Background(), scheduler.Request{Class: "interactive"})
	if err != nil {
		t.Fatal(err)
	}
	l.Release(scheduler.Done)
	c.Close()
	wait.Until(t, "released", func() bool { return sched.Stats()[0].InFlight == 0 })
	if st := sched.Stats()[0]; st.Done != 1 || st.Cancelled != 0 {
		t.Fatalf("counters %+v, want the release done", st.Counters)
	}
}
