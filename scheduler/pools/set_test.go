package pools_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/policy"
	"github.com/llmesh/llmesh/scheduler/pools"
	"github.com/llmesh/llmesh/testkit/schedtest"
	"github.com/llmesh/llmesh/testkit/wait"
)

var policyLookup = policy.Lookup

// twoClasses is a config with one pool and an urgent and a batch class.
// newSchedulers builds cfg's pools, closed when the test ends.
func newSchedulers(t *testing.T, cfg scheduler.Config) *pools.Set {
	t.Helper()
	s, err := pools.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// waitQueued polls until pool has n waiting requests in total.
func waitQueued(t *testing.T, s *pools.Set, pool string, n int) {
	t.Helper()
	wait.UntilNil(t, fmt.Sprintf("pool %s to have %d waiting", pool, n), func() error {
		st := s.Stats()
		for _, ps := range st {
			q := 0
			for _, v := range ps.Queued {
				q += v
			}
			if ps.Name == pool && q == n {
				return nil
			}
		}
		return fmt.Errorf("stats %+v", st)
	})
}

func noResult(t *testing.T, ch <-chan schedtest.Admission) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("unexpected admission result %s: %v", r.Name, r.Err)
	case <-time.After(50 * time.Millisecond):
	}
}

// A capacity change replaces the pool's scheduler: the held lease stays
// valid and counts against the new limit, the waiting requests move over in
// arrival order.
func TestSchedulersUpdateKeepsLeasesAndWaiters(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := newSchedulers(t, schedtest.TwoClasses(t, "fifo", 1))
	held, err := s.Admit(ctx, scheduler.Request{ID: "a", Class: "batch"})
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan schedtest.Admission, 2)
	t0 := time.Now()
	schedtest.AdmitInto(ctx, s, "b", scheduler.Request{ID: "b", Class: "batch", Arrival: t0}, ch)
	waitQueued(t, s, "gpu", 1)
	schedtest.AdmitInto(ctx, s, "c", scheduler.Request{ID: "c", Class: "batch", Arrival: t0.Add(time.Millisecond)}, ch)
	waitQueued(t, s, "gpu", 2)

	if err := s.Update(schedtest.TwoClasses(t, "fifo", 2)); err != nil {
		t.Fatal(err)
	}
	// Limit 2 less the one lease the old scheduler still holds: one more.
	first := schedtest.Next(t, ch)
	if first.Err != nil || first.Name != "b" {
		t.Fatalf("first after reload: %s %v, want b admitted", first.Name, first.Err)
	}
	noResult(t, ch)
	st := s.Stats()[0]
	if st.InFlight != 2 || st.Limit != 1 {
		t.Fatalf("stats after reload: inflight %d limit %d, want 2 and 1 (2 less the old lease)", st.InFlight, st.Limit)
	}
	held.Release(scheduler.Done)
	second := schedtest.Next(t, ch)
	if second.Err != nil || second.Name != "c" {
		t.Fatalf("after the old lease ended: %s %v, want c admitted", second.Name, second.Err)
	}
	st = s.Stats()[0]
	if st.Limit != 2 || st.InFlight != 2 || st.Done != 1 {
		t.Fatalf("stats: limit %d inflight %d done %d, want 2, 2, 1", st.Limit, st.InFlight, st.Done)
	}
	first.Lease.Release(scheduler.Done)
	second.Lease.Release(scheduler.Done)
	held.Release(scheduler.Done) // a second release is ignored
	if st := s.Stats()[0]; st.InFlight != 0 || st.Done != 3 {
		t.Fatalf("stats at the end: inflight %d done %d, want 0 and 3", st.InFlight, st.Done)
	}
}

// An unchanged config keeps the running scheduler: nothing moves.
func TestSchedulersUpdateUnchangedKeepsQueue(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := schedtest.TwoClasses(t, "priority", 1)
	s := newSchedulers(t, cfg)
	held, err := s.Admit(ctx, scheduler.Request{Class: "batch"})
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan schedtest.Admission, 1)
	schedtest.AdmitInto(ctx, s, "w", scheduler.Request{Class: "batch"}, ch)
	waitQueued(t, s, "gpu", 1)
	if err := s.Update(schedtest.TwoClasses(t, "priority", 1)); err != nil {
		t.Fatal(err)
	}
	noResult(t, ch)
	if st := s.Stats()[0]; st.Cancelled != 0 || st.Arrived != 2 {
		t.Fatalf("an unchanged pool moved its queue: %+v", st.Counters)
	}
	held.Release(scheduler.Done)
	r := schedtest.Next(t, ch)
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	r.Lease.Release(scheduler.Done)
}

// A policy change takes effect for the requests already waiting: fifo
// admits in arrival order, priority serves the urgent class first.
func TestSchedulersUpdatePolicyReordersWaiting(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := newSchedulers(t, schedtest.TwoClasses(t, "fifo", 1))
	held, err := s.Admit(ctx, scheduler.Request{Class: "batch"})
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan schedtest.Admission, 2)
	t0 := time.Now()
	schedtest.AdmitInto(ctx, s, "batch", scheduler.Request{Class: "batch", Arrival: t0}, ch)
	waitQueued(t, s, "gpu", 1)
	schedtest.AdmitInto(ctx, s, "urgent", scheduler.Request{Class: "urgent", Arrival: t0.Add(time.Millisecond)}, ch)
	waitQueued(t, s, "gpu", 2)
	// Capacity 2 less the held lease: one slot, which priority gives to
	// the later but urgent request.
	if err := s.Update(schedtest.TwoClasses(t, "priority", 2)); err != nil {
		t.Fatal(err)
	}
	r := schedtest.Next(t, ch)
	if r.Err != nil || r.Name != "urgent" {
		t.Fatalf("first admitted after the switch to priority: %s %v, want urgent", r.Name, r.Err)
	}
	noResult(t, ch)
	held.Release(scheduler.Done)
	r.Lease.Release(scheduler.Done)
	r = schedtest.Next(t, ch)
	if r.Err != nil || r.Name != "batch" {
		t.Fatalf("second: %s %v, want batch", r.Name, r.Err)
	}
	r.Lease.Release(scheduler.Done)
}

// A removed pool rejects its waiting requests and new ones, naming the
// pool; its admitted leases still release.
func TestSchedulersUpdateRemovesPool(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := schedtest.TwoClasses(t, "fifo", 1)
	cfg.Pools = append(cfg.Pools, scheduler.PoolConfig{Name: "cpu", MaxInflight: 1, Policy: schedtest.Policy(t, "fifo")})
	s := newSchedulers(t, cfg)
	held, err := s.Admit(ctx, scheduler.Request{Pool: "cpu"})
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan schedtest.Admission, 1)
	schedtest.AdmitInto(ctx, s, "w", scheduler.Request{Pool: "cpu"}, ch)
	waitQueued(t, s, "cpu", 1)
	if err := s.Update(schedtest.TwoClasses(t, "fifo", 1)); err != nil {
		t.Fatal(err)
	}
	r := schedtest.Next(t, ch)
	if !errors.Is(r.Err, scheduler.ErrRejected) || !strings.Contains(r.Err.Error(), `"cpu"`) {
		t.Fatalf("waiter on a removed pool: %v, want ErrRejected naming the pool", r.Err)
	}
	if _, err := s.Admit(ctx, scheduler.Request{Pool: "cpu"}); !errors.Is(err, scheduler.ErrRejected) {
		t.Fatalf("admit to a removed pool: %v", err)
	}
	held.Release(scheduler.Done)
	if got := s.Pools(); len(got) != 1 || got[0] != "gpu" {
		t.Fatalf("pools %v", got)
	}
}

// An invalid config changes nothing and says which field is wrong.
func TestSchedulersUpdateInvalidKeepsRunning(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := newSchedulers(t, schedtest.TwoClasses(t, "fifo", 1))
	bad := schedtest.TwoClasses(t, "fifo", 0)
	if err := s.Update(bad); err == nil || !strings.Contains(err.Error(), "pools[0].max_inflight") {
		t.Fatalf("Update(invalid) = %v, want an error naming pools[0].max_inflight", err)
	}
	l, err := s.Admit(ctx, scheduler.Request{})
	if err != nil {
		t.Fatal(err)
	}
	l.Release(scheduler.Done)
	if st := s.Stats()[0]; st.MaxInflight != 1 {
		t.Fatalf("max inflight %d after a rejected update", st.MaxInflight)
	}
}

// A learned capacity survives a rebuild of the pool's scheduler, and
// ForgetLimit restores the static one.
func TestSchedulersLearnedLimitSurvivesUpdate(t *testing.T) {
	s := newSchedulers(t, schedtest.TwoClasses(t, "fifo", 8))
	if err := s.SetLimit("gpu", 3); err != nil {
		t.Fatal(err)
	}
	if err := s.SetLimit("nope", 3); err == nil {
		t.Fatal("SetLimit on an unknown pool succeeded")
	}
	if err := s.Update(schedtest.TwoClasses(t, "edf", 8)); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats()[0]; st.Limit != 3 {
		t.Fatalf("limit after rebuild %d, want the learned 3", st.Limit)
	}
	s.ForgetLimit("gpu")
	if st := s.Stats()[0]; st.Limit != 8 {
		t.Fatalf("limit after ForgetLimit %d, want 8", st.Limit)
	}
}

// Close rejects waiters and new requests with ErrClosed.
func TestSchedulersClose(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := pools.New(schedtest.TwoClasses(t, "fifo", 1), nil)
	if err != nil {
		t.Fatal(err)
	}
	held, err := s.Admit(ctx, scheduler.Request{})
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan schedtest.Admission, 1)
	schedtest.AdmitInto(ctx, s, "w", scheduler.Request{}, ch)
	waitQueued(t, s, "gpu", 1)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if r := schedtest.Next(t, ch); !errors.Is(r.Err, scheduler.ErrClosed) {
		t.Fatalf("waiter after Close: %v", r.Err)
	}
	if _, err := s.Admit(ctx, scheduler.Request{}); !errors.Is(err, scheduler.ErrClosed) {
		t.Fatalf("admit after Close: %v", err)
	}
	if err := s.Update(schedtest.TwoClasses(t, "fifo", 2)); !errors.Is(err, scheduler.ErrClosed) {
		t.Fatalf("Update after Close: %v", err)
	}
	held.Release(scheduler.Done)
	_ = s.Close()
}

// Many requests of one class waiting through a replacement are admitted in
// the order they arrived, not the order their goroutines woke up in.
func TestSchedulersUpdateKeepsQueueOrder(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := newSchedulers(t, schedtest.TwoClasses(t, "fifo", 1))
	held, err := s.Admit(ctx, scheduler.Request{Class: "batch"})
	if err != nil {
		t.Fatal(err)
	}
	const n = 8
	ch := make(chan schedtest.Admission, n)
	for i := range n {
		schedtest.AdmitInto(ctx, s, fmt.Sprint(i), scheduler.Request{Class: "batch"}, ch)
		waitQueued(t, s, "gpu", i+1)
	}
	for round, pol := range []string{"edf", "fifo"} { // two replacements in a row
		if err := s.Update(schedtest.TwoClasses(t, pol, 1)); err != nil {
			t.Fatal(err)
		}
		waitQueued(t, s, "gpu", n)
		if st := s.Stats()[0]; st.InFlight != 1 {
			t.Fatalf("round %d: in flight %d, want only the held lease", round, st.InFlight)
		}
	}
	held.Release(scheduler.Done)
	for i := range n {
		r := schedtest.Next(t, ch)
		if r.Err != nil || r.Name != fmt.Sprint(i) {
			t.Fatalf("admission %d: %s %v, want %d", i, r.Name, r.Err, i)
		}
		r.Lease.Release(scheduler.Done)
	}
	st := s.Stats()[0]
	if st.Admitted != n+1 || st.Done != n+1 {
		t.Errorf("counters %+v, want %d admitted and done (placeholders left out)", st.Counters, n+1)
	}
}

// Leases of a replaced scheduler that fill the whole capacity keep new
// requests waiting (a scheduler's own limit cannot go below 1).
func TestSchedulersUpdateNoOvershoot(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := newSchedulers(t, schedtest.TwoClasses(t, "fifo", 2))
	var held []scheduler.Lease
	for range 2 {
		l, err := s.Admit(ctx, scheduler.Request{Class: "batch"})
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	if err := s.Update(schedtest.TwoClasses(t, "priority", 1)); err != nil { // capacity 1, two still running
		t.Fatal(err)
	}
	ch := make(chan schedtest.Admission, 1)
	schedtest.AdmitInto(ctx, s, "new", scheduler.Request{Class: "urgent"}, ch)
	waitQueued(t, s, "gpu", 1)
	held[0].Release(scheduler.Done)
	noResult(t, ch) // one old lease still fills the capacity of 1
	if st := s.Stats()[0]; st.InFlight != 1 {
		t.Fatalf("in flight %d, want the one old lease", st.InFlight)
	}
	held[1].Release(scheduler.Done)
	r := schedtest.Next(t, ch)
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	if st := s.Stats()[0]; st.InFlight != 1 || st.Limit != 1 {
		t.Fatalf("in flight %d limit %d, want 1 and 1", st.InFlight, st.Limit)
	}
	r.Lease.Release(scheduler.Done)
}

// Admissions and releases racing with replacements: the in-flight count
// never passes the largest capacity configured, nothing is lost, and
// everything is released at the end (run with -race).
func TestSchedulersUpdateUnderLoad(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := newSchedulers(t, schedtest.TwoClasses(t, "fifo", 3))
	var mu sync.Mutex
	inflight, peak, admitted := 0, 0, 0
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for g := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			class := []string{"urgent", "batch"}[g%2]
			for {
				select {
				case <-stop:
					return
				default:
				}
				l, err := s.Admit(ctx, scheduler.Request{Class: class})
				if err != nil {
					t.Errorf("admit: %v", err)
					return
				}
				mu.Lock()
				inflight++
				admitted++
				peak = max(peak, inflight)
				mu.Unlock()
				time.Sleep(100 * time.Microsecond)
				mu.Lock()
				inflight--
				mu.Unlock()
				l.Release(scheduler.Done)
			}
		}()
	}
	policies := []string{"fifo", "priority", "edf", "preemptive"}
	for i := range 40 {
		if err := s.Update(schedtest.TwoClasses(t, policies[i%len(policies)], 2+i%3)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if peak > 4 {
		t.Errorf("peak in flight %d, past the largest capacity configured (4)", peak)
	}
	st := s.Stats()[0]
	if st.InFlight != 0 || st.Admitted != uint64(admitted) || st.Done != uint64(admitted) {
		t.Errorf("after the load: in flight %d, admitted %d, done %d; want 0, %d, %d", st.InFlight, st.Admitted, st.Done, admitted, admitted)
	}
}

// With a batching window there is no placeholder (admission waits for the
// window's tick anyway); waiting requests still move over and are admitted.
func TestSchedulersUpdateBatchWindow(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := func(window time.Duration, n int) scheduler.Config {
		c := schedtest.TwoClasses(t, "fifo", n)
		c.Pools[0].BatchWindow = window
		return c
	}
	s := newSchedulers(t, cfg(5*time.Millisecond, 1))
	held, err := s.Admit(ctx, scheduler.Request{Class: "batch"})
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan schedtest.Admission, 3)
	for i := range 3 {
		schedtest.AdmitInto(ctx, s, fmt.Sprint(i), scheduler.Request{Class: "batch"}, ch)
		waitQueued(t, s, "gpu", i+1)
	}
	if err := s.Update(cfg(10*time.Millisecond, 2)); err != nil {
		t.Fatal(err)
	}
	first := schedtest.Next(t, ch) // capacity 2 less the held lease
	if first.Err != nil || first.Name != "0" {
		t.Fatalf("first after reload: %s %v, want 0", first.Name, first.Err)
	}
	held.Release(scheduler.Done)
	first.Lease.Release(scheduler.Done)
	for range 2 {
		r := schedtest.Next(t, ch)
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		r.Lease.Release(scheduler.Done)
	}
}
