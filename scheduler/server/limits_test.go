package server_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/llmesh/llmesh/api/schedulerv1"
	"github.com/llmesh/llmesh/clock"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/server"
	"github.com/llmesh/llmesh/testkit/schedtest"
	"github.com/llmesh/llmesh/testkit/wait"
)

// limitsConfig: one slot, an urgent class that preempts batch, batch's
// queue holding one.
func limitsConfig(t *testing.T) scheduler.Config {
	return scheduler.Config{
		Pools: []scheduler.PoolConfig{{Name: "gpu", MaxInflight: 1, Policy: schedtest.Policy(t, "preemptive"),
			Preemption: scheduler.PreemptionConfig{MinLowerInflight: 1, MaxPerRequest: 2}}},
		Classes: []scheduler.ClassConfig{
			{Name: "urgent", Priority: 0, TTFT: 200 * time.Millisecond},
			{Name: "batch", Priority: 10, TTFT: 10 * time.Second, Preemptible: true, MaxQueue: 1},
		},
		DefaultClass: "batch",
	}
}

// serveLimits serves a scheduler of limitsConfig with l and clk and opens
// a session on it.
func serveLimits(t *testing.T, l server.Limits, clk clock.Clock) (func(...*schedulerv1.LeaseRequest), func() *schedulerv1.LeaseResponse, func() string, string) {
	t.Helper()
	s, err := scheduler.New(limitsConfig(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu     sync.Mutex
		logged []string
	)
	srv := server.New(s, clk)
	srv.SetLimits(l)
	srv.SetLog(func(format string, args ...any) {
		mu.Lock()
		logged = append(logged, fmt.Sprintf(format, args...))
		mu.Unlock()
	})
	g := grpc.NewServer()
	srv.Register(g)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	st, err := sessionAPI(t, lis.Addr().String()).Session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	send, recv := sessionIO(t, st)
	log := func() string {
		mu.Lock()
		defer mu.Unlock()
		return strings.Join(logged, "")
	}
	return send, recv, log, lis.Addr().String()
}

func startAs(id uint64, class string, requeue bool) *schedulerv1.LeaseRequest {
	return &schedulerv1.LeaseRequest{Lease: id, Msg: &schedulerv1.LeaseRequest_Start{Start: &schedulerv1.Start{Class: class, Requeue: requeue}}}
}

// A proxy that ignores a Preempt loses the lease after the grace period,
// and the urgent request it was preempted for is admitted.
func TestIgnoredPreemptIsEndedByTheService(t *testing.T) {
	clk := clock.NewFake(time.Now())
	send, recv, logged, _ := serveLimits(t, server.Limits{PreemptGrace: 5 * time.Second}, clk)
	send(startAs(1, "batch", false))
	if r := recv(); r.GetLease() != 1 || r.GetAdmitted() == nil {
		t.Fatalf("answer %v, want lease 1 admitted", r)
	}
	send(startAs(2, "urgent", false))
	if r := recv(); r.GetLease() != 1 || r.GetPreempt() == nil {
		t.Fatalf("answer %v, want lease 1 preempted", r)
	}
	clk.Advance(5 * time.Second)
	if r := recv(); r.GetLease() != 2 || r.GetAdmitted() == nil {
		t.Fatalf("answer %v, want lease 2 admitted once lease 1's grace ran out", r)
	}
	wait.Until(t, "the ignored preemption logged", func() bool { return strings.Contains(logged(), "lease 1 ignored its preemption for 5s") })
}

// A Start marked requeue counts against max_queue unless the session has
// a preempted lease to requeue.
func TestRequeueNeedsAPreemptedLease(t *testing.T) {
	send, recv, logged, _ := serveLimits(t, server.Limits{}, nil)
	send(startAs(1, "batch", false))
	if r := recv(); r.GetLease() != 1 || r.GetAdmitted() == nil {
		t.Fatalf("answer %v, want lease 1 admitted", r)
	}
	send(startAs(4, "batch", false)) // waits: batch's queue is full now
	send(startAs(5, "batch", true))  // no preempted lease: a new arrival
	if r := recv(); r.GetLease() != 5 || r.GetRejected().GetReason() != schedulerv1.Rejected_REASON_QUEUE_FULL {
		t.Fatalf("answer %v, want lease 5 rejected: queue full", r)
	}
	if !strings.Contains(logged(), "lease 5 marked requeue without a preempted lease") {
		t.Errorf("log %q, want the unfounded requeue reported", logged())
	}
	send(startAs(2, "urgent", false))
	if r := recv(); r.GetLease() != 1 || r.GetPreempt() == nil {
		t.Fatalf("answer %v, want lease 1 preempted", r)
	}
	// Lease 1 goes back to the queue as lease 6: past the full queue.
	send(&schedulerv1.LeaseRequest{Lease: 1, Msg: &schedulerv1.LeaseRequest_Done{Done: &schedulerv1.Done{Outcome: schedulerv1.Outcome_OUTCOME_PREEMPTED}}},
		startAs(6, "batch", true))
	admitted := map[uint64]bool{}
	for !admitted[6] {
		r := recv()
		if r.GetRejected() != nil {
			t.Fatalf("answer %v: a requeue of a preempted lease was rejected", r)
		}
		if r.GetAdmitted() != nil {
			admitted[r.GetLease()] = true
			send(done1(r.GetLease()))
		}
	}
}

func TestSessionLeaseAndSessionCaps(t *testing.T) {
	send, recv, _, addr := serveLimits(t, server.Limits{MaxLeasesPerSession: 2, MaxSessions: 1}, nil)
	send(startAs(1, "batch", false))
	if r := recv(); r.GetAdmitted() == nil {
		t.Fatalf("answer %v, want admitted", r)
	}
	send(startAs(2, "batch", false), startAs(3, "batch", false))
	if r := recv(); r.GetLease() != 3 || !strings.Contains(r.GetRejected().GetMessage(), "holds 2 leases, its limit") {
		t.Fatalf("answer %v, want lease 3 rejected at the session's lease limit", r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s2, err := sessionAPI(t, addr).Session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s2.Recv()
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "the limit is 1") {
		t.Fatalf("second session: %v, want RESOURCE_EXHAUSTED at the limit of 1", err)
	}
}
