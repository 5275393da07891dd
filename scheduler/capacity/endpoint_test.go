package capacity_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/capacity"
	"github.com/llmesh/llmesh/scheduler/policy"
	"github.com/llmesh/llmesh/sim/simtest"
	"github.com/llmesh/llmesh/testkit/wait"
)

// TestEndpointWatchers: a pool of two endpoints, each scraped at its own
// /metrics (url_template). The live sim's endpoint stays healthy and
// reports its load; the endpoint nobody listens on is drained, so every
// admission goes to the live one.
func TestEndpointWatchers(t *testing.T) {
	s := simtest.Start(t)
	live := strings.TrimPrefix(s.HTTPURL, "http://")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close() // nothing listens there now
	c, err := config.Load([]byte(`
pools:
  - name: gpu
    protocol: openai
    capacity: {max_inflight: 8, metrics: {url_template: "http://{endpoint}/metrics", interval: 10ms}}
    endpoints: [` + live + `, ` + dead + `]
`))
	if err != nil {
		t.Fatal(err)
	}
	fifo, _ := policy.Lookup("fifo")
	sc, err := scheduler.FromMesh(c, policy.Lookup)
	if err != nil {
		t.Fatal(err)
	}
	pc := sc.Pools[0]
	pc.Policy = fifo
	sched, err := scheduler.New(scheduler.Config{Pools: []scheduler.PoolConfig{pc}, Classes: []scheduler.ClassConfig{{Name: "c"}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sched.Close()
	ws, err := capacity.FromMesh(c, sched, nil, nil)
	if err != nil || len(ws) != 2 {
		t.Fatalf("FromMesh: %d watchers, %v; want one per endpoint", len(ws), err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, w := range ws {
		wg.Add(1)
		go func() { defer wg.Done(); _ = w.Run(ctx) }()
	}
	defer func() { cancel(); wg.Wait() }()
	wait.UntilNil(t, "the second endpoint drained", func() error {
		st := sched.Stats()[0].Endpoints
		if st[1].Drained && !st[0].Drained && ws[0].Status().Scrapes > 1 {
			return nil
		}
		return fmt.Errorf("endpoints %+v; watchers %+v / %+v", st, ws[0].Status(), ws[1].Status())
	})
	for i := 0; i < 3; i++ {
		l, err := sched.Admit(ctx, scheduler.Request{Class: "c"})
		if err != nil {
			t.Fatal(err)
		}
		if ep := scheduler.EndpointOf(l); ep != live {
			t.Errorf("admitted to %s, want the live %s", ep, live)
		}
		defer l.Release(scheduler.Done)
	}
}
