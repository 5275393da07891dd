package server_test

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/server"
	"github.com/llmesh/llmesh/testkit/schedtest"
)

// TestSchedulersLeaseEndpoint: a lease handed out through Schedulers (what
// the gateway and the service use) names its endpoint, and a drained
// endpoint gets no new admission.
func TestSchedulersLeaseEndpoint(t *testing.T) {
	cfg := schedtest.TwoClasses(t, "fifo", 4)
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

// TestCollectorEndpointGauges: the service exports each endpoint's limit,
// in-flight count, drain state, admissions and the engine's load report.
func TestCollectorEndpointGauges(t *testing.T) {
	cfg := schedtest.TwoClasses(t, "fifo", 4)
	cfg.Pools[0].Endpoints = []scheduler.EndpointConfig{{Name: "10.0.0.1:1", MaxInflight: 3}, {Name: "10.0.0.2:1", MaxInflight: 1}}
	s := newSchedulers(t, cfg)
	l, err := s.Admit(context.Background(), scheduler.Request{Pool: "gpu"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(scheduler.Done)
	if err := s.SetEndpointHealth("gpu", "10.0.0.2:1", false); err != nil {
		t.Fatal(err)
	}
	if err := s.SetEndpointLoad("gpu", "10.0.0.1:1", scheduler.EndpointLoad{Running: 5, Waiting: 2, KVUsage: 0.25}); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(server.NewCollector(s.Stats))
	var b strings.Builder
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []string{
		`llmesh_scheduler_endpoint_limit{endpoint="10.0.0.1:1",pool="gpu"} 3`,
		`llmesh_scheduler_endpoint_inflight{endpoint="10.0.0.1:1",pool="gpu"} 1`,
		`llmesh_scheduler_endpoint_drained{endpoint="10.0.0.2:1",pool="gpu"} 1`,
		`llmesh_scheduler_endpoint_admitted_total{endpoint="10.0.0.1:1",pool="gpu"} 1`,
		`llmesh_scheduler_endpoint_running{endpoint="10.0.0.1:1",pool="gpu"} 5`,
		`llmesh_scheduler_endpoint_waiting{endpoint="10.0.0.1:1",pool="gpu"} 2`,
		`llmesh_scheduler_endpoint_kv_usage{endpoint="10.0.0.1:1",pool="gpu"} 0.25`,
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("missing %s in:\n%s", want, b.String())
		}
	}
}
