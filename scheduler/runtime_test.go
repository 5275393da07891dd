package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/llmesh/llmesh/clock"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/policy/fifo"
	"github.com/llmesh/llmesh/testkit/schedtest"
	"github.com/llmesh/llmesh/testkit/wait"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newScheduler(t *testing.T, pc scheduler.PoolConfig, clk clock.Clock, classes ...scheduler.ClassConfig) *scheduler.Scheduler {
	t.Helper()
	if pc.Name == "" {
		pc.Name = "p"
	}
	if len(classes) == 0 {
		classes = twoClasses()
	}
	s, err := scheduler.New(scheduler.Config{Pools: []scheduler.PoolConfig{pc}, Classes: classes}, clk)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func queued(s *scheduler.Scheduler) int {
	n := 0
	for _, q := range s.Stats()[0].Queued {
		n += q
	}
	return n
}

func TestSchedulerAdmitReleaseCancel(t *testing.T) {
	s := newScheduler(t, scheduler.PoolConfig{MaxInflight: 1, Policy: fifo.New()}, nil)
	ctx := context.Background()
	l, err := s.Admit(ctx, scheduler.Request{})
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	second := schedtest.Admit(cctx, s, scheduler.Request{})
	wait.Until(t, "second request queued", func() bool { return queued(s) == 1 })
	cancel()
	if r := <-second; !errors.Is(r.Err, scheduler.ErrCancelled) || !errors.Is(r.Err, context.Canceled) {
		t.Fatalf("cancelled Admit: %v, want ErrCancelled wrapping context.Canceled", r.Err)
	}
	third := schedtest.Admit(ctx, s, scheduler.Request{})
	wait.Until(t, "third request queued", func() bool { return queued(s) == 1 })
	l.Release(scheduler.Done)
	l.Release(scheduler.Failed) // ignored
	r := <-third
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	if st := s.Stats()[0]; st.InFlight != 1 || st.Done != 1 || st.Failed != 0 || st.Cancelled != 1 {
		t.Fatalf("stats %+v", st)
	}
	r.Lease.Release(scheduler.Done)
}

func TestSchedulerMaxWaitOnFakeClock(t *testing.T) {
	clk := clock.NewFake(t0)
	classes := twoClasses()
	classes[1].MaxWait = 2 * time.Second
	s := newScheduler(t, scheduler.PoolConfig{MaxInflight: 1, Policy: fifo.New()}, clk, classes...)
	l, err := s.Admit(context.Background(), scheduler.Request{Class: "batch"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(scheduler.Done)
	ch := schedtest.Admit(context.Background(), s, scheduler.Request{Class: "batch"})
	wait.Until(t, "timer armed", func() bool { return clk.Timers() == 1 })
	clk.Advance(time.Second)
	select {
	case r := <-ch:
		t.Fatalf("decided after 1s: %v", r.Err)
	default:
	}
	clk.Advance(time.Second)
	if r := <-ch; !errors.Is(r.Err, scheduler.ErrRejected) {
		t.Fatalf("after max wait: %v, want ErrRejected", r.Err)
	}
}

func TestSchedulerPreemptChannel(t *testing.T) {
	clk := clock.NewFake(t0)
	s := newScheduler(t, preemptivePool(1, rails), clk)
	ctx := context.Background()
	batch, err := s.Admit(ctx, scheduler.Request{ID: "b", Class: "batch", MaxTokens: 500})
	if err != nil {
		t.Fatal(err)
	}
	hi := schedtest.Admit(ctx, s, scheduler.Request{ID: "i", Class: "interactive"})
	select {
	case <-batch.Preempt():
	case <-time.After(10 * time.Second):
		t.Fatal("batch lease was not preempted")
	}
	clk.Advance(30 * time.Millisecond)
	batch.Release(scheduler.Preempted)
	r := <-hi
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	if r.Lease.QueueTime() != 30*time.Millisecond {
		t.Errorf("queue time %v, want 30ms", r.Lease.QueueTime())
	}
	select {
	case <-r.Lease.Preempt():
		t.Fatal("interactive lease preempted")
	default:
	}
	// The victim comes back at the front of its class.
	requeued := schedtest.Admit(ctx, s, scheduler.Request{ID: "b", Class: "batch", MaxTokens: 500, Requeue: true, Arrival: t0})
	r.Lease.Release(scheduler.Done)
	if rr := <-requeued; rr.Err != nil {
		t.Fatal(rr.Err)
	} else {
		rr.Lease.Release(scheduler.Done)
	}
}

func TestSchedulerClose(t *testing.T) {
	s := newScheduler(t, scheduler.PoolConfig{MaxInflight: 1, Policy: fifo.New()}, nil)
	l, err := s.Admit(context.Background(), scheduler.Request{})
	if err != nil {
		t.Fatal(err)
	}
	ch := schedtest.Admit(context.Background(), s, scheduler.Request{})
	wait.Until(t, "queued", func() bool { return queued(s) == 1 })
	s.Close()
	if r := <-ch; !errors.Is(r.Err, scheduler.ErrClosed) {
		t.Fatalf("waiting Admit after Close: %v, want ErrClosed", r.Err)
	}
	if _, err := s.Admit(context.Background(), scheduler.Request{}); !errors.Is(err, scheduler.ErrClosed) {
		t.Fatalf("Admit after Close: %v", err)
	}
	l.Release(scheduler.Done)
	if st := s.Stats()[0]; st.InFlight != 0 {
		t.Fatalf("in flight after release: %d", st.InFlight)
	}
}

// TestSchedulerConcurrent hammers one scheduler from many goroutines with
// admissions, progress, cancellations and releases; capacity must never be
// exceeded and nothing may leak.
func TestSchedulerConcurrent(t *testing.T) {
	const limit = 4
	s := newScheduler(t, preemptivePool(limit, rails), nil)
	var mu sync.Mutex
	inflight, peak := 0, 0
	var wg sync.WaitGroup
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for i := 0; i < 200; i++ {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rng.IntN(3000))*time.Microsecond)
				cls := []string{"interactive", "batch"}[rng.IntN(2)]
				l, err := s.Admit(ctx, scheduler.Request{ID: fmt.Sprint(g, "-", i), Class: cls, MaxTokens: 50})
				if err != nil {
					cancel()
					if !errors.Is(err, scheduler.ErrCancelled) {
						t.Errorf("Admit: %v", err)
					}
					continue
				}
				mu.Lock()
				inflight++
				peak = max(peak, inflight)
				mu.Unlock()
				for k := 0; k < rng.IntN(5); k++ {
					l.Progress(scheduler.Progress{FirstToken: true, Tokens: k + 1})
				}
				o := scheduler.Done
				select {
				case <-l.Preempt():
					o = scheduler.Preempted
				default:
				}
				mu.Lock()
				inflight--
				mu.Unlock()
				l.Release(o)
				l.Release(o)
				cancel()
			}
		}(g)
	}
	wg.Wait()
	if peak > limit {
		t.Fatalf("peak in flight %d > limit %d", peak, limit)
	}
	st := s.Stats()[0]
	if st.InFlight != 0 || st.InFlightTokens != 0 || queued(s) != 0 {
		t.Fatalf("leaked: %+v", st)
	}
	t.Logf("counters %+v", st.Counters)
}
