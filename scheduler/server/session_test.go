package server_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"

	"github.com/llmesh/llmesh/api/schedulerv1"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/client"
	"github.com/llmesh/llmesh/scheduler/server"
)

func sessionAPI(t *testing.T, addr string) schedulerv1.SchedulerClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return schedulerv1.NewSchedulerClient(conn)
}

func start1(id uint64) *schedulerv1.LeaseRequest {
	return &schedulerv1.LeaseRequest{Lease: id, Msg: &schedulerv1.LeaseRequest_Start{Start: &schedulerv1.Start{Class: "default"}}}
}

func done1(id uint64) *schedulerv1.LeaseRequest {
	return &schedulerv1.LeaseRequest{Lease: id, Msg: &schedulerv1.LeaseRequest_Done{Done: &schedulerv1.Done{}}}
}

// The Session wire protocol as the service sees it, message by message:
// several leases in one message, answers named by lease, a Done that
// withdraws a waiting request, and the stream's end releasing every lease
// it held (the next session is admitted at once).
func TestSessionWire(t *testing.T) {
	admin, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr, stop := startMesh(t, strings.Replace(mesh, "max_length: 1", "max_length: 2", 1), server.Options{Registry: metricsOn(t, admin)})
	defer stop()
	metrics := "http://" + admin.Addr().String() + "/metrics"
	api := sessionAPI(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := api.Session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	send, recv := sessionIO(t, s)
	// 7 is admitted, 9 and 11 wait (the pool holds one), 12 finds the
	// queue full. (The leases of one message are admitted concurrently, so
	// the test waits for each step.)
	send(start1(7))
	if r := recv(); r.GetLease() != 7 || r.GetAdmitted() == nil {
		t.Fatalf("first answer %v, want lease 7 admitted", r)
	}
	send(start1(9), start1(11))
	waitMetric(t, metrics, `llmesh_scheduler_queued{class="default",pool="gpu"} 2`)
	send(start1(12))
	if r := recv(); r.GetLease() != 12 || r.GetRejected().GetReason() != schedulerv1.Rejected_REASON_QUEUE_FULL {
		t.Fatalf("answer %v, want lease 12 rejected: queue full", r)
	}
	// 9 withdraws; releasing 7 then admits 11. (Should the scheduler
	// admit 9 before it has seen the withdrawal, the service releases it
	// at once and says nothing.)
	send(done1(9), done1(7))
	if r := recv(); r.GetLease() != 11 || r.GetAdmitted() == nil {
		t.Fatalf("answer %v, want lease 11 admitted", r)
	}
	// The session ends holding 11: the service releases it.
	cancel()
	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	s2, err := api.Session(ctx2)
	if err != nil {
		t.Fatal(err)
	}
	if err := s2.Send(&schedulerv1.SessionRequest{Leases: []*schedulerv1.LeaseRequest{start1(1)}}); err != nil {
		t.Fatal(err)
	}
	m, err := s2.Recv()
	if err != nil || len(m.GetLeases()) != 1 || m.GetLeases()[0].GetAdmitted() == nil {
		t.Fatalf("new session after the old one ended: %v %v, want admitted", m, err)
	}
}

func TestSessionProtocolErrors(t *testing.T) {
	addr, stop := start(t)
	defer stop()
	api := sessionAPI(t, addr)
	for _, tc := range []struct {
		msgs []*schedulerv1.LeaseRequest
		want string
	}{
		{[]*schedulerv1.LeaseRequest{start1(0)}, "lease_request.lease must not be 0"},
		{[]*schedulerv1.LeaseRequest{start1(3), start1(3)}, "lease_request.lease 3 is already in use"},
		{[]*schedulerv1.LeaseRequest{{Lease: 4, Msg: &schedulerv1.LeaseRequest_Start{Start: &schedulerv1.Start{AgeNs: -5}}}}, "start.age_ns -5"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		s, err := api.Session(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Send(&schedulerv1.SessionRequest{Leases: tc.msgs}); err != nil {
			t.Fatal(err)
		}
		var rerr error
		for rerr == nil { // an admission may be answered before the error
			_, rerr = s.Recv()
		}
		if !strings.Contains(rerr.Error(), tc.want) {
			t.Errorf("after %v: %v, want %q", tc.msgs, rerr, tc.want)
		}
		cancel()
	}
}

// waitMetric polls a /metrics URL until its text holds line.
func waitMetric(t *testing.T, url, line string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var body []byte
	for time.Now().Before(deadline) {
		resp, err := http.Get(url)
		if err == nil {
			body, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			if strings.Contains(string(body), line) {
				return
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("%s never showed %q; last:\n%s", url, line, body)
}

// freezer forwards TCP connections to target until freeze, after which it
// drops whatever either side sends without closing anything: a peer that
// vanished without a FIN or RST.
type freezer struct {
	l      net.Listener
	target string
	frozen atomic.Bool
	done   chan struct{}
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  []net.Conn
}

func newFreezer(t *testing.T, target string) *freezer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &freezer{l: l, target: target, done: make(chan struct{})}
	f.wg.Add(1)
	go f.accept()
	t.Cleanup(f.close)
	return f
}

func (f *freezer) accept() {
	defer f.wg.Done()
	for {
		c, err := f.l.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", f.target)
		if err != nil {
			c.Close()
			continue
		}
		f.mu.Lock()
		f.conns = append(f.conns, c, up)
		f.mu.Unlock()
		f.wg.Add(2)
		go f.pipe(c, up)
		go f.pipe(up, c)
	}
}

func (f *freezer) pipe(from, to net.Conn) {
	defer f.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := from.Read(buf)
		if err != nil {
			return
		}
		if f.frozen.Load() {
			continue // dropped
		}
		if _, err := to.Write(buf[:n]); err != nil {
			return
		}
	}
}

func (f *freezer) close() {
	f.l.Close()
	f.mu.Lock()
	for _, c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}

// A proxy whose connection goes silent (no FIN, no RST) loses its leases
// once a keepalive ping goes unanswered, not hours later: gRPC's pings, and
// the framed transport's, both about Time + Timeout after the last frame.
func TestSilentProxyLosesItsLeases(t *testing.T) {
	for _, tr := range []string{client.TransportGRPC, client.TransportFramed} {
		t.Run(tr, func(t *testing.T) {
			admin, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addr, stop := startMesh(t, strings.Replace(mesh, "max_inflight: 1", "max_inflight: 4", 1), server.Options{
				Registry: metricsOn(t, admin), Keepalive: keepalive.ServerParameters{Time: time.Second, Timeout: 500 * time.Millisecond},
			})
			defer stop()
			metrics := "http://" + admin.Addr().String() + "/metrics"
			f := newFreezer(t, addr)
			c, err := client.New(f.l.Addr().String(), client.Options{Transport: tr})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			for range 2 {
				if _, err := c.Admit(context.Background(), scheduler.Request{}); err != nil {
					t.Fatal(err)
				}
			}
			waitMetric(t, metrics, `llmesh_scheduler_inflight{pool="gpu"} 2`)
			f.frozen.Store(true)
			begin := time.Now()
			waitMetric(t, metrics, `llmesh_scheduler_inflight{pool="gpu"} 0`)
			took := time.Since(begin)
			t.Logf("leases freed %v after the connection went silent", took.Round(100*time.Millisecond))
			// Time + Timeout (1.5 s), with room for a busy machine but not
			// for a second idle period (2.5 s).
			if took > 2200*time.Millisecond {
				t.Errorf("leases freed %v after the connection went silent, want about 1.5s (keepalive time + timeout)", took)
			}
			waitMetric(t, metrics, `llmesh_scheduler_service_sessions 0`)
		})
	}
}

// sessionIO sends lease messages on s in one stream message and receives
// one answer per stream message, failing t on a stream error.
func sessionIO(t *testing.T, s grpc.BidiStreamingClient[schedulerv1.SessionRequest, schedulerv1.SessionResponse]) (send func(...*schedulerv1.LeaseRequest), recv func() *schedulerv1.LeaseResponse) {
	send = func(rs ...*schedulerv1.LeaseRequest) {
		t.Helper()
		if err := s.Send(&schedulerv1.SessionRequest{Leases: rs}); err != nil {
			t.Fatal(err)
		}
	}
	recv = func() *schedulerv1.LeaseResponse {
		t.Helper()
		m, err := s.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if len(m.GetLeases()) != 1 {
			t.Fatalf("got %d answers in one message, want 1: %v", len(m.GetLeases()), m)
		}
		return m.GetLeases()[0]
	}
	return send, recv
}
