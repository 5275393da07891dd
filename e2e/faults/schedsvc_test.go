package faults

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/llmesh/llmesh/gateway"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/client"
	"github.com/llmesh/llmesh/scheduler/server"
	"github.com/llmesh/llmesh/sim/simtest"
)

// service is a shared scheduler service that can be stopped and started
// again on the same address, as a restarted process would be.
type service struct {
	t     *testing.T
	addr  string
	sched *scheduler.Scheduler
	grpc  *grpc.Server
	done  chan struct{}
}

func startService(t *testing.T, addr string) *service {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("scheduler service listen %s: %v", addr, err)
	}
	sched, err := scheduler.New(schedConfig(t, "priority", 4), nil)
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	server.New(sched, nil).Register(g)
	s := &service{t: t, addr: ln.Addr().String(), sched: sched, grpc: g, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		_ = g.Serve(ln)
	}()
	return s
}

// stop kills the service: every admission stream is cut at once.
func (s *service) stop() {
	s.grpc.Stop()
	<-s.done
	s.sched.Close()
}

func (s *service) pool() scheduler.PoolStats { return poolStats(s.t, s.sched.Stats(), "sim") }

// outcome tallies what clients saw.
type outcome struct {
	ok, unavailable, other atomic.Int64
	mu                     sync.Mutex
	others                 []string
}

func (o *outcome) bad(s string) {
	o.other.Add(1)
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.others) < 5 {
		o.others = append(o.others, s)
	}
}

// one sends a request and classifies the result: a complete stream, a clean
// 503 from a fail-closed admission, or anything else (a failure).
// The phase is read when the answer arrives, so a refusal is charged to the
// phase in which it happened.
func one(ctx context.Context, gw, model string, phase *atomic.Pointer[outcome]) {
	res, err := send(ctx, gw, completion(model, 16, "load"), nil)
	if err != nil {
		if ctx.Err() == nil {
			phase.Load().bad(err.Error())
		}
		return
	}
	defer res.Body.Close()
	o := phase.Load()
	switch res.StatusCode {
	case http.StatusOK:
		ev := readAll(res.Body)
		if ctx.Err() != nil {
			return // the load stopped mid-stream
		}
		if len(ev) == 0 || ev[len(ev)-1].data != "[DONE]" {
			o.bad(fmt.Sprintf("stream of %d events ended without [DONE]: %+v", len(ev), ev[max(0, len(ev)-1):]))
			return
		}
		o.ok.Add(1)
	case http.StatusServiceUnavailable:
		b, _ := io.ReadAll(res.Body)
		if !strings.Contains(string(b), "unavailable") {
			o.bad("503 without the cause: " + string(b))
			return
		}
		o.unavailable.Add(1)
	default:
		b, _ := io.ReadAll(res.Body)
		o.bad(fmt.Sprintf("%d %s", res.StatusCode, b))
	}
}

// TestSchedulerServiceRestartUnderLoad kills the shared scheduler service
// while 12 clients keep requests flowing through the gateway, then starts
// it again on the same address. Fail-open admits every request while the
// service is away; fail-closed answers 503 (ErrUnavailable) meanwhile. In
// both modes every request ends (no stuck streams), traffic goes through
// the restarted service again, and neither the old nor the new service
// holds capacity once the load stops.
func TestSchedulerServiceRestartUnderLoad(t *testing.T) {
	for _, failOpen := range []bool{false, true} {
		name := "fail_closed"
		if failOpen {
			name = "fail_open"
		}
		t.Run(name, func(t *testing.T) {
			s := simtest.Start(t)
			svc := startService(t, "127.0.0.1:0")
			cl, err := client.New(svc.addr, client.Options{FailOpen: failOpen, Timeout: 200 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cl.Close() })
			gw := startGateway(t, gateway.Config{Pools: pools(s.HTTPURL, "")}, gateway.WithAdmitter(cl))

			var before, during, after outcome
			phase := atomic.Pointer[outcome]{}
			phase.Store(&before)
			ctx, stopLoad := context.WithCancel(context.Background())
			defer stopLoad()
			var wg sync.WaitGroup
			for i := 0; i < 12; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for ctx.Err() == nil {
						one(ctx, gw, s.Model, &phase)
					}
				}()
			}

			poll.Until(t, "load through the service", func() (bool, string) {
				p := svc.pool()
				return p.Counters.Done >= 20, fmt.Sprintf("%+v", p.Counters)
			})
			// The phase moves first: a request refused while the service
			// shuts down may be answered before stop returns, and would
			// otherwise count as refused while the service was up.
			phase.Store(&during)
			svc.stop()
			poll.Until(t, "old service released everything", func() (bool, string) { return idle(svc.pool()) })
			poll.Until(t, "requests answered while the service is down", func() (bool, string) {
				n := during.ok.Load() + during.unavailable.Load()
				return n >= 20, fmt.Sprintf("ok %d unavailable %d other %d", during.ok.Load(), during.unavailable.Load(), during.other.Load())
			})

			restarted := startService(t, svc.addr)
			poll.Until(t, "load through the restarted service", func() (bool, string) {
				p := restarted.pool()
				return p.Counters.Done >= 20, fmt.Sprintf("%+v", p.Counters)
			})
			phase.Store(&after)
			poll.Until(t, "requests after the restart", func() (bool, string) {
				return after.ok.Load() >= 20, fmt.Sprintf("ok %d", after.ok.Load())
			})
			stopLoad()
			finished := make(chan struct{})
			go func() { wg.Wait(); close(finished) }()
			select {
			case <-finished:
			case <-time.After(wait):
				t.Fatal("clients still waiting after the load stopped: stuck requests")
			}
			poll.Until(t, "restarted service idle", func() (bool, string) { return idle(restarted.pool()) })
			restarted.stop()

			t.Logf("before: ok %d; down: ok %d, 503 %d; after: ok %d, 503 %d",
				before.ok.Load(), during.ok.Load(), during.unavailable.Load(), after.ok.Load(), after.unavailable.Load())
			for _, o := range []*outcome{&before, &during, &after} {
				if o.other.Load() != 0 {
					t.Errorf("%d requests failed otherwise, e.g. %q", o.other.Load(), o.others)
				}
			}
			if before.unavailable.Load() != 0 {
				t.Errorf("%d requests refused while the service was up", before.unavailable.Load())
			}
			if failOpen && during.unavailable.Load() != 0 {
				t.Errorf("fail-open refused %d requests while the service was down", during.unavailable.Load())
			}
			if !failOpen && during.unavailable.Load() == 0 {
				t.Errorf("fail-closed admitted everything while the service was down (ok %d)", during.ok.Load())
			}
		})
	}
}
