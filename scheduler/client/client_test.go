package client_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"

	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/client"
	"github.com/llmesh/llmesh/scheduler/framed"
	"github.com/llmesh/llmesh/scheduler/policy/fifo"
	"github.com/llmesh/llmesh/scheduler/policy/preemptive"
	"github.com/llmesh/llmesh/scheduler/server"
	"github.com/llmesh/llmesh/testkit/schedtest"
	"github.com/llmesh/llmesh/testkit/wait"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// service is a real scheduler service on a loopback port.
type service struct {
	addr  string
	sched *scheduler.Scheduler
	g     *grpc.Server
	mux   *framed.Mux
	done  chan struct{}
}

func config(limit int, p scheduler.Policy) scheduler.Config {
	return scheduler.Config{
		Pools: []scheduler.PoolConfig{{Name: "gpu", MaxInflight: limit, Policy: p,
			Preemption: scheduler.PreemptionConfig{MinLowerInflight: 1, MaxPerRequest: 2}}},
		Classes: []scheduler.ClassConfig{
			{Name: "interactive", Priority: 0, TTFT: 200 * time.Millisecond},
			{Name: "batch", Priority: 10, TTFT: 10 * time.Second, TPOT: 100 * time.Millisecond, Preemptible: true, MaxQueue: 2},
		},
	}
}

func startService(t testing.TB, addr string, cfg scheduler.Config) *service {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	sched, err := scheduler.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Both transports on one address, as scheduler/server.Run serves them.
	s := &service{addr: l.Addr().String(), sched: sched, g: grpc.NewServer(), mux: framed.NewMux(l, net.KeepAliveConfig{}), done: make(chan struct{})}
	srv := server.New(sched, nil)
	srv.Register(s.g)
	go func() {
		defer close(s.done)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = s.mux.Serve(context.Background(), func(c *framed.ServerConn) error { return srv.ServeSession(c) })
		}()
		_ = s.g.Serve(s.mux.Other())
		s.mux.Close()
		wg.Wait()
	}()
	t.Cleanup(s.stop)
	return s
}

func (s *service) stop() {
	s.g.Stop()
	s.mux.Close()
	<-s.done
	s.sched.Close()
}

func (s *service) inflight() int { return s.sched.Stats()[0].InFlight }

func (s *service) queued() int {
	n := 0
	for _, q := range s.sched.Stats()[0].Queued {
		n += q
	}
	return n
}

// perAdmission makes newClient use one Admit stream per admission (the
// protocol of older services); TestPerAdmissionStreams sets it.
var perAdmission bool

// transport is the session transport newClient uses when a test names
// none; TestFramedTransport sets it to framed.
var transport = client.TransportGRPC

func newClient(t *testing.T, addr string, opts client.Options) *client.Client {
	t.Helper()
	opts.StreamPerAdmission = opts.StreamPerAdmission || perAdmission
	if opts.Transport == "" {
		opts.Transport = transport
	}
	c, err := client.New(addr, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Two gateways (two clients, two connections) share one pool of 2.
func TestTwoClientsShareOneCapacity(t *testing.T) {
	svc := startService(t, "127.0.0.1:0", config(2, fifo.New()))
	a := newClient(t, svc.addr, client.Options{})
	b := newClient(t, svc.addr, client.Options{})
	ctx := context.Background()
	var mu sync.Mutex
	cur, peak := 0, 0
	var wg sync.WaitGroup
	for i := 0; i < 12; i++ {
		c := a
		if i%2 == 1 {
			c = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := c.Admit(ctx, scheduler.Request{Class: "interactive"})
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			cur++
			peak = max(peak, cur)
			mu.Unlock()
			if n := svc.inflight(); n > 2 {
				t.Errorf("service has %d in flight, capacity 2", n)
			}
			l.Progress(scheduler.Progress{FirstToken: true, Tokens: 3})
			time.Sleep(time.Millisecond) // hold the slot briefly so requests overlap
			mu.Lock()
			cur--
			mu.Unlock()
			l.Release(scheduler.Done)
		}()
	}
	wg.Wait()
	if peak > 2 {
		t.Fatalf("peak %d admitted at once across both clients, capacity 2", peak)
	}
	wait.Until(t, "all released", func() bool { return svc.inflight() == 0 })
	if st := svc.sched.Stats()[0]; st.Admitted != 12 || st.Done != 12 {
		t.Fatalf("service counters %+v, want 12 admitted and done", st.Counters)
	}
}

// A proxy that goes away frees its slots.
func TestDeadClientFreesSlots(t *testing.T) {
	svc := startService(t, "127.0.0.1:0", config(2, fifo.New()))
	dying, err := client.New(svc.addr, client.Options{StreamPerAdmission: perAdmission, Transport: transport})
	if err != nil {
		t.Fatal(err)
	}
	other := newClient(t, svc.addr, client.Options{})
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		if _, err := dying.Admit(ctx, scheduler.Request{}); err != nil {
			t.Fatal(err)
		}
	}
	waiting := schedtest.Admit(ctx, other, scheduler.Request{})
	wait.Until(t, "second client queued", func() bool { return svc.queued() == 1 })
	dying.Close() // the connection drops; the leases were never released
	r := <-waiting
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	wait.Until(t, "dead client's slots released", func() bool { return svc.inflight() == 1 })
	r.Lease.Release(scheduler.Done)
	wait.Until(t, "all released", func() bool { return svc.inflight() == 0 })
	if st := svc.sched.Stats()[0]; st.Cancelled != 2 || st.Done != 1 {
		t.Fatalf("counters %+v, want the dead client's two leases cancelled", st.Counters)
	}
}

func TestPreemptOverTheWire(t *testing.T) {
	svc := startService(t, "127.0.0.1:0", config(1, preemptive.New()))
	a := newClient(t, svc.addr, client.Options{})
	b := newClient(t, svc.addr, client.Options{})
	ctx := context.Background()
	batch, err := a.Admit(ctx, scheduler.Request{ID: "b1", Class: "batch", MaxTokens: 1000})
	if err != nil {
		t.Fatal(err)
	}
	batch.Progress(scheduler.Progress{FirstToken: true, Tokens: 1})
	hi := schedtest.Admit(ctx, b, scheduler.Request{ID: "i1", Class: "interactive"})
	select {
	case <-batch.Preempt():
	case <-time.After(10 * time.Second):
		t.Fatal("no preempt event reached the client")
	}
	batch.Release(scheduler.Preempted)
	r := <-hi
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	r.Lease.Release(scheduler.Done)
	wait.Until(t, "released", func() bool { return svc.inflight() == 0 })
	if st := svc.sched.Stats()[0]; st.Preempted != 1 || st.PreemptedDone != 1 || st.Done != 1 {
		t.Fatalf("counters %+v", st.Counters)
	}
}

func TestRejectionsAndCancel(t *testing.T) {
	svc := startService(t, "127.0.0.1:0", config(1, fifo.New()))
	c := newClient(t, svc.addr, client.Options{})
	ctx := context.Background()
	held, err := c.Admit(ctx, scheduler.Request{Class: "batch"})
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	q1 := schedtest.Admit(cctx, c, scheduler.Request{Class: "batch"})
	q2 := schedtest.Admit(cctx, c, scheduler.Request{Class: "batch"})
	wait.Until(t, "two queued", func() bool { return svc.queued() == 2 })
	if _, err := c.Admit(ctx, scheduler.Request{Class: "batch"}); !errors.Is(err, scheduler.ErrQueueFull) {
		t.Fatalf("third waiting batch: %v, want ErrQueueFull", err)
	}
	if _, err := c.Admit(ctx, scheduler.Request{Pool: "nope"}); !errors.Is(err, scheduler.ErrRejected) {
		t.Fatalf("unknown pool: %v, want ErrRejected", err)
	}
	cancel()
	for _, q := range []<-chan schedtest.Admission{q1, q2} {
		if r := <-q; !errors.Is(r.Err, scheduler.ErrCancelled) {
			t.Fatalf("cancelled wait: %v, want ErrCancelled", r.Err)
		}
	}
	wait.Until(t, "queue emptied by cancellation", func() bool { return svc.queued() == 0 })
	held.Release(scheduler.Done)
	wait.Until(t, "released", func() bool { return svc.inflight() == 0 })
}

func TestFailureModes(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens here
	ctx := context.Background()

	closed := newClient(t, addr, client.Options{})
	if _, err := closed.Admit(ctx, scheduler.Request{}); !errors.Is(err, scheduler.ErrUnavailable) {
		t.Fatalf("fail_closed: %v, want ErrUnavailable", err)
	}

	open := newClient(t, addr, client.Options{FailOpen: true})
	lease, err := open.Admit(ctx, scheduler.Request{})
	if err != nil {
		t.Fatalf("fail_open: %v", err)
	}
	lease.Progress(scheduler.Progress{Tokens: 1})
	lease.Release(scheduler.Done)

	local, err := scheduler.New(config(1, fifo.New()), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	fb := newClient(t, addr, client.Options{FailOpen: true, Fallback: local})
	lease, err = fb.Admit(ctx, scheduler.Request{})
	if err != nil {
		t.Fatalf("fail_open with fallback: %v", err)
	}
	if local.Stats()[0].InFlight != 1 {
		t.Fatal("fallback scheduler did not admit the request")
	}
	lease.Release(scheduler.Done)
}

// Restarting the service: a lease held across the restart stays valid
// locally, admissions fail (closed) while it is down, and work again once a
// new instance listens on the same address.
func TestServiceRestart(t *testing.T) {
	svc := startService(t, "127.0.0.1:0", config(2, fifo.New()))
	c := newClient(t, svc.addr, client.Options{})
	ctx := context.Background()
	held, err := c.Admit(ctx, scheduler.Request{})
	if err != nil {
		t.Fatal(err)
	}
	svc.stop()
	if _, err := c.Admit(ctx, scheduler.Request{}); !errors.Is(err, scheduler.ErrUnavailable) {
		t.Fatalf("while down: %v, want ErrUnavailable", err)
	}
	svc2 := startService(t, svc.addr, config(2, fifo.New()))
	var l scheduler.Lease
	wait.Until(t, "admission after restart", func() bool {
		l, err = c.Admit(ctx, scheduler.Request{})
		return err == nil
	})
	if svc2.inflight() != 1 {
		t.Fatalf("new instance has %d in flight, want 1 (it does not know leases of the old one)", svc2.inflight())
	}
	l.Release(scheduler.Done)
	held.Release(scheduler.Done) // its stream died with the old instance: a no-op
	wait.Until(t, "released", func() bool { return svc2.inflight() == 0 })
}

func TestAdmitAfterClose(t *testing.T) {
	svc := startService(t, "127.0.0.1:0", config(1, fifo.New()))
	c, err := client.New(svc.addr, client.Options{FailOpen: true})
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if _, err := c.Admit(context.Background(), scheduler.Request{}); !errors.Is(err, scheduler.ErrClosed) {
		t.Fatalf("Admit after Close: %v, want ErrClosed", err)
	}
}
