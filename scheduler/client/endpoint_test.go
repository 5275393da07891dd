package client_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/client"
	"github.com/llmesh/llmesh/scheduler/policy/fifo"
	"github.com/llmesh/llmesh/testkit/wait"
)

// TestLeaseEndpointOverTheWire: two proxies share one service whose pool
// has two endpoints of one slot each; each lease names the endpoint the
// service bound it to, the two differ, and an affinity key crosses the
// wire (the same key lands on the same endpoint as before).
func TestLeaseEndpointOverTheWire(t *testing.T) {
	cfg := config(4, fifo.New())
	cfg.Pools[0].Endpoints = []scheduler.EndpointConfig{{Name: "10.0.0.1:8000", MaxInflight: 1}, {Name: "10.0.0.2:8000", MaxInflight: 1}}
	svc := startService(t, "127.0.0.1:0", cfg)
	a := newClient(t, svc.addr, client.Options{})
	b := newClient(t, svc.addr, client.Options{})
	ctx := context.Background()
	la, err := a.Admit(ctx, scheduler.Request{Class: "interactive"})
	if err != nil {
		t.Fatal(err)
	}
	lb, err := b.Admit(ctx, scheduler.Request{Class: "interactive"})
	if err != nil {
		t.Fatal(err)
	}
	ea, eb := scheduler.EndpointOf(la), scheduler.EndpointOf(lb)
	if ea == "" || eb == "" || ea == eb {
		t.Fatalf("endpoints %q and %q, want the two distinct endpoints", ea, eb)
	}
	la.Release(scheduler.Done)
	lb.Release(scheduler.Done)
	wait.Until(t, "released", func() bool { return svc.inflight() == 0 })

	// With nothing in flight the least loaded endpoint is always the
	// first; keys that rank the second first can only land there if the
	// key crossed the wire.
	admit := func(key string) string {
		l, err := a.Admit(ctx, scheduler.Request{Class: "interactive", Affinity: key})
		if err != nil {
			t.Fatal(err)
		}
		defer wait.Until(t, "released", func() bool { return svc.inflight() == 0 })
		defer l.Release(scheduler.Done)
		return scheduler.EndpointOf(l)
	}
	second := 0
	for i := 0; i < 10; i++ {
		key := fmt.Sprint("conversation-", i)
		ep := admit(key)
		if again := admit(key); again != ep {
			t.Fatalf("key %s on %s, then on %s", key, ep, again)
		}
		if ep == "10.0.0.2:8000" {
			second++
		}
	}
	if second == 0 {
		t.Fatal("no affinity key reached the second endpoint: the key did not cross the wire")
	}
}
