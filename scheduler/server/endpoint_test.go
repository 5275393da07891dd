package server_test

import (
	"context"
	"testing"

	"github.com/llmesh/llmesh/scheduler"
)

// TestSchedulersLeaseEndpoint: a lease handed out through Schedulers (what
// the gateway and the service use) names its endpoint, and a drained
// endpoint gets no new admission.
func TestSchedulersLeaseEndpoint(t *testing.T) {
	cfg := twoClasses(t, "fifo", 4)
	cfg.Pools[0].Endpoints = []scheduler.EndpointConfig{{Name: "10.0.0.1:1", MaxInflight: 2}, {Name: "10.0.0.2:1", MaxInflight: 2}}
	s := newSchedulers(t, cfg)
	if err := s.SetEndpointHealth("gpu", "10.0.0.1:1", false); err != nil {
		t.Fatal(err)
	}
	var ls []scheduler.Lease
	for i := 0; i < 2; i++ {
		l, err := s.Admit(context.Background(), scheduler.Request{Pool: "gpu"})
		if err != nil {
			t.Fatal(err)
		}
		if ep := scheduler.EndpointOf(l); ep != "10.0.0.2:1" {
			t.Fatalf("lease %d on %q, want the healthy 10.0.0.2:1", i, ep)
		}
		ls = append(ls, l)
	}
	if err := s.SetEndpointHealth("gpu", "10.0.0.1:1", true); err != nil {
		t.Fatal(err)
	}
	l, err := s.Admit(context.Background(), scheduler.Request{Pool: "gpu"})
	if err != nil {
		t.Fatal(err)
	}
	if ep := scheduler.EndpointOf(l); ep != "10.0.0.1:1" {
		t.Fatalf("third lease on %q", ep)
	}
	for _, l := range append(ls, l) {
		l.Release(scheduler.Done)
	}
	if err := s.SetEndpointLimit("nope", "x", 1); err == nil {
		t.Fatal("unknown pool accepted")
	}
}
