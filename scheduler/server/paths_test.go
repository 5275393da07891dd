package server_test

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/llmesh/llmesh/api/schedulerv1"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/server"
	"github.com/llmesh/llmesh/testkit/schedtest"
	"github.com/llmesh/llmesh/testkit/wait"
)

// opaque hides what its Admitter and leases can do beyond the interfaces,
// so the service takes its general path: a goroutine per waiting Start and
// per lease watching for its preemption.
type opaque struct{ a scheduler.Admitter }

type opaqueLease struct{ scheduler.Lease }

func (o opaque) Admit(ctx context.Context, req scheduler.Request) (scheduler.Lease, error) {
	l, err := o.a.Admit(ctx, req)
	if err != nil {
		return nil, err
	}
	return opaqueLease{l}, nil
}

// Every way the service admits gives the same exchange over Session: an
// admission decided at once, a request that waits, a preemption sent to
// the victim's lease, the waiting request admitted when the victim is
// released, and every lease released once.
func TestSessionAdmissionPaths(t *testing.T) {
	cfg := func(t *testing.T) scheduler.Config {
		return scheduler.Config{
			Pools: []scheduler.PoolConfig{{Name: "gpu", MaxInflight: 1, Policy: schedtest.Policy(t, "preemptive"),
				Preemption: scheduler.PreemptionConfig{MinLowerInflight: 1, MaxPerRequest: 2}}},
			Classes: []scheduler.ClassConfig{
				{Name: "urgent", Priority: 0, TTFT: 200 * time.Millisecond},
				{Name: "batch", Priority: 10, TTFT: 10 * time.Second, Preemptible: true},
			},
			DefaultClass: "batch",
		}
	}
	type stats interface{ Stats() []scheduler.PoolStats }
	for _, tc := range []struct {
		name string
		new  func(t *testing.T) (scheduler.Admitter, stats)
	}{
		{"set", func(t *testing.T) (scheduler.Admitter, stats) { s := newSchedulers(t, cfg(t)); return s, s }},
		{"scheduler", func(t *testing.T) (scheduler.Admitter, stats) {
			s, err := scheduler.New(cfg(t), nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s, s
		}},
		{"opaque", func(t *testing.T) (scheduler.Admitter, stats) {
			s := newSchedulers(t, cfg(t))
			return opaque{s}, s
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, st := tc.new(t)
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			g := grpc.NewServer()
			server.New(a, nil).Register(g)
			go func() { _ = g.Serve(l) }()
			defer g.Stop()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			s, err := sessionAPI(t, l.Addr().String()).Session(ctx)
			if err != nil {
				t.Fatal(err)
			}
			send, recv := sessionIO(t, s)
			startClass := func(id uint64, class string) *schedulerv1.LeaseRequest {
				return &schedulerv1.LeaseRequest{Lease: id, Msg: &schedulerv1.LeaseRequest_Start{Start: &schedulerv1.Start{Class: class}}}
			}
			send(startClass(1, "batch"))
			if r := recv(); r.GetLease() != 1 || r.GetAdmitted() == nil {
				t.Fatalf("answer %v, want lease 1 admitted", r)
			}
			// 2 waits for the only slot; the scheduler preempts 1 for it.
			send(startClass(2, "urgent"))
			if r := recv(); r.GetLease() != 1 || r.GetPreempt() == nil {
				t.Fatalf("answer %v, want lease 1 preempted", r)
			}
			send(&schedulerv1.LeaseRequest{Lease: 1, Msg: &schedulerv1.LeaseRequest_Done{Done: &schedulerv1.Done{Outcome: schedulerv1.Outcome_OUTCOME_PREEMPTED}}})
			if r := recv(); r.GetLease() != 2 || r.GetAdmitted() == nil {
				t.Fatalf("answer %v, want lease 2 admitted", r)
			}
			// The session ends holding 2: the service releases it.
			cancel()
			wait.Until(t, "lease 2 released", func() bool { return st.Stats()[0].InFlight == 0 })
			if c := st.Stats()[0].Counters; c.Admitted != 2 || c.Preempted != 1 || c.Cancelled != 1 {
				t.Fatalf("counters %+v, want 2 admitted, 1 preempted, 1 cancelled", c)
			}
		})
	}
}
