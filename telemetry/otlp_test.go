package telemetry

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	colmetric "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
)

// collector is a real OTLP/gRPC receiver on loopback that remembers the
// metric and span names it was sent.
type collector struct {
	colmetric.UnimplementedMetricsServiceServer

	mu      sync.Mutex
	metrics map[string]bool
	spans   map[string]bool
	service string
}

func (c *collector) Export(_ context.Context, req *colmetric.ExportMetricsServiceRequest) (*colmetric.ExportMetricsServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rm := range req.GetResourceMetrics() {
		for _, a := range rm.GetResource().GetAttributes() {
			if a.GetKey() == "service.name" {
				c.service = a.GetValue().GetStringValue()
			}
		}
		for _, sm := range rm.GetScopeMetrics() {
			for _, m := range sm.GetMetrics() {
				c.metrics[m.GetName()] = true
			}
		}
	}
	return &colmetric.ExportMetricsServiceResponse{}, nil
}

// traceServer receives spans into the same collector.
type traceServer struct {
	coltrace.UnimplementedTraceServiceServer
	c *collector
}

func (t *traceServer) Export(_ context.Context, req *coltrace.ExportTraceServiceRequest) (*coltrace.ExportTraceServiceResponse, error) {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				t.c.spans[s.GetName()] = true
			}
		}
	}
	return &coltrace.ExportTraceServiceResponse{}, nil
}

// startCollector starts a loopback OTLP/gRPC collector for the test and
// returns it and its address.
func startCollector(t *testing.T) (*collector, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &collector{metrics: map[string]bool{}, spans: map[string]bool{}}
	srv := grpc.NewServer()
	colmetric.RegisterMetricsServiceServer(srv, c)
	coltrace.RegisterTraceServiceServer(srv, &traceServer{c: c})
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Serve(ln) })
	t.Cleanup(func() { srv.Stop(); wg.Wait() })
	return c, ln.Addr().String()
}

func TestOTLPExport(t *testing.T) {
	c, addr := startCollector(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := New(ctx, Options{ServiceName: "gw-test", OTLPEndpoint: addr, OTLPInsecure: true, OTLPInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	obs := observe(t)
	p.Recorder.Record(obs, "interactive", "llama")
	p.Recorder.Trace(ctx, obs, "interactive", "llama")
	if err := p.ForceFlush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range []string{MetricTTFT, MetricTPOT, MetricDuration, MetricTokenUsage, MetricQueue, MetricInterChunk} {
		if !c.metrics[m] {
			t.Errorf("collector did not receive %s (got %v)", m, c.metrics)
		}
	}
	for _, s := range []string{SpanRequest, SpanQueue, SpanPrefill, SpanDecode} {
		if !c.spans[s] {
			t.Errorf("collector did not receive span %s (got %v)", s, c.spans)
		}
	}
	if c.service != "gw-test" {
		t.Errorf("service.name %q", c.service)
	}
}
