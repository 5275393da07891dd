package runner

import (
	"context"
	"errors"
	"runtime"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/llmesh/llmesh/bench/client"
	"github.com/llmesh/llmesh/bench/result"
	"github.com/llmesh/llmesh/bench/workload"
	"github.com/llmesh/llmesh/clock"
)

// Options configure Run.
type Options struct {
	// Workload is what to send; required.
	Workload *workload.Workload
	// Client sends the requests; required.
	Client client.Client
	// Clock times the run; nil means clock.Real.
	Clock clock.Clock
	// Sink gets each finished record, in completion order, from one
	// goroutine; nil means none. It must not keep the pointer.
	Sink func(*result.Record)
	// Live, when not nil, is updated as requests start and finish.
	Live *Live
	// MaxInFlight caps concurrent requests of an open loop; when reached,
	// sending waits (and the wait shows up as schedule lag). Zero means
	// 65536.
	MaxInFlight int
	// Spin is how long before a send time the dispatcher stops waiting on
	// a clock timer and sleeps precisely instead (nanosleep on Linux): Go
	// timers can wake up to about a millisecond late, which alone would
	// break a 1 ms schedule-lag budget. Zero means 1ms with the real clock
	// and none with any other clock; negative disables it.
	Spin time.Duration
}

// Run sends the workload and returns every record (warm-up included),
// ordered by item index. When ctx ends early it stops sending, cancels the
// requests in flight (recorded as cancelled), and returns what it has with
// ctx's error; nothing that completed is lost.
func Run(ctx context.Context, o Options) ([]result.Record, error) {
	if o.Workload == nil || o.Client == nil {
		return nil, errors.New("runner: Workload and Client are required")
	}
	clk := o.Clock
	if clk == nil {
		clk = clock.Real{}
	}
	maxIn := o.MaxInFlight
	if maxIn <= 0 {
		maxIn = 65536
	}
	start := clk.Now()
	now := func() int64 { return int64(clk.Since(start)) }

	done := make(chan *result.Record, 4096)
	var recs []result.Record
	collected := make(chan struct{})
	go func() { // owns recs until collected is closed
		defer close(collected)
		for r := range done {
			if o.Live != nil {
				o.Live.finish(r)
			}
			if o.Sink != nil {
				o.Sink(r)
			}
			recs = append(recs, *r)
		}
	}()

	spin := o.Spin
	if spin == 0 {
		if _, real := clk.(clock.Real); real {
			spin = time.Millisecond
		}
	}
	r := &run{o: o, clk: clk, now: now, done: done, sem: make(chan struct{}, maxIn), spin: max(0, spin)}
	reqCtx, cancelReqs := context.WithCancel(context.WithoutCancel(ctx))
	// Requests in flight are cancelled only when the run is interrupted,
	// not when the dispatcher finishes.
	stop := context.AfterFunc(ctx, cancelReqs)
	if o.Workload.Closed() {
		r.closed(ctx, reqCtx)
	} else {
		r.open(ctx, reqCtx)
	}
	r.wg.Wait()
	stop()
	cancelReqs()
	close(done)
	<-collected
	sortByIndex(recs)
	return recs, ctx.Err()
}

type run struct {
	o    Options
	clk  clock.Clock
	now  func() int64
	done chan<- *result.Record
	sem  chan struct{}
	spin time.Duration
	wg   sync.WaitGroup
}

// waitUntil returns at run time at (false if ctx ended first): on the
// clock's timer until spin before it, then in a precise sleep. Before the
// precise sleep it yields once: the request handed to a worker just before
// sits in this P's run-next slot, and a thread asleep in a system call keeps
// its P until the runtime's monitor takes it away (20 µs at best, and then
// on another thread that the kernel must first schedule), so without the
// yield a request could start only when that happened or when the sleep
// for the next one ended.
func (r *run) waitUntil(ctx context.Context, timer clock.Timer, at time.Duration) bool {
	yielded := false
	for {
		d := at - time.Duration(r.now())
		if d <= 0 {
			return ctx.Err() == nil
		}
		if d > r.spin {
			timer.Reset(d - r.spin)
			select {
			case <-ctx.Done():
				return false
			case <-timer.C():
			}
			continue
		}
		if ctx.Err() != nil {
			return false
		}
		if !yielded {
			yielded = true
			runtime.Gosched()
			continue
		}
		preciseSleep(d)
	}
}

// open sends items at their intended times from one dispatcher goroutine.
// Requests run on reused worker goroutines: a fresh goroutine per request
// grew its stack through the HTTP client's call chain every time (stack
// copying was about 8% of the CPU at 2,000 requests/s), while a worker
// keeps its grown stack. A worker that is waiting takes the next item
// directly from the dispatcher; when none is waiting, the dispatcher starts
// one more, so the pool grows to the largest number in flight and no item
// waits for a worker.
func (r *run) open(ctx, reqCtx context.Context) {
	src := r.o.Workload.Source()
	timer := r.clk.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	work := make(chan workload.Item) // unbuffered: a send succeeds only into a waiting worker
	defer close(work)
	for {
		it, ok := src.Next()
		if !ok {
			return
		}
		if !r.waitUntil(ctx, timer, it.At) {
			return
		}
		select {
		case r.sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		select {
		case work <- it:
		default:
			r.wg.Add(1)
			go r.worker(reqCtx, it, work)
		}
	}
}

// worker sends it, then every item it receives from work, until work is
// closed.
func (r *run) worker(ctx context.Context, it workload.Item, work <-chan workload.Item) {
	defer r.wg.Done()
	for {
		r.send(ctx, it, int64(it.At))
		<-r.sem
		var ok bool
		if it, ok = <-work; !ok {
			return
		}
	}
}

// closed keeps Concurrency clients busy, each sending its next item as soon
// as its previous one ends, until the items run out or the measured
// duration has passed.
func (r *run) closed(ctx, reqCtx context.Context) {
	sp := &r.o.Workload.Spec
	src := r.o.Workload.Source()
	var (
		mu            sync.Mutex
		measuredStart int64 = -1
	)
	next := func() (workload.Item, int64, bool) {
		mu.Lock()
		defer mu.Unlock()
		if ctx.Err() != nil {
			return workload.Item{}, 0, false
		}
		it, ok := src.Next()
		if !ok {
			return it, 0, false
		}
		t := r.now()
		if t < int64(sp.Warmup.Duration) {
			it.Warmup = true
		}
		if !it.Warmup {
			if measuredStart < 0 {
				measuredStart = t
			}
			if sp.Duration > 0 && t-measuredStart >= int64(sp.Duration) {
				return it, 0, false
			}
		}
		return it, t, true
	}
	for i := 0; i < sp.Arrival.Concurrency; i++ {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			for {
				it, t, ok := next()
				if !ok {
					return
				}
				r.send(reqCtx, it, t)
			}
		}()
	}
}

// send performs one item and hands its record to the collector.
func (r *run) send(ctx context.Context, it workload.Item, intended int64) {
	w := r.o.Workload
	c := &w.Classes[it.Class]
	rec := &result.Record{
		Index: it.Index, Class: c.Name, Warmup: it.Warmup,
		PromptTokens: it.PromptTokens, MaxTokens: it.MaxTokens, IntendedNS: intended,
	}
	if *w.Spec.Stream {
		// One chunk per token at most in the usual case: no regrowth while
		// the stream is read.
		rec.ChunkNS = make([]int64, 0, min(max(it.MaxTokens, 1), 4096))
	}
	req := &client.Request{
		ID: strconv.Itoa(it.Index), Model: w.Spec.Model,
		PromptTokens: it.PromptTokens, MaxTokens: it.MaxTokens,
		Priority: c.Priority, SendPriority: c.SendPriority, Headers: c.Headers,
		Stream: *w.Spec.Stream, Segments: it.Segments,
	}
	if r.o.Live != nil {
		r.o.Live.start()
	}
	ctx, cancel := context.WithTimeout(ctx, w.Spec.Timeout.D())
	r.o.Client.Do(ctx, req, rec, r.now)
	cancel()
	if rec.Engine != nil {
		// A gateway's Server-Timing count (a requeue or continuation the
		// engine saw as a new request) wins over the engine's own.
		rec.Preemptions = max(rec.Preemptions, rec.Engine.Preemptions)
	}
	r.done <- rec
}

func sortByIndex(recs []result.Record) {
	sort.Slice(recs, func(i, j int) bool { return recs[i].Index < recs[j].Index })
}
