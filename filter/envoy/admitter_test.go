package envoy

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/filter"
)

func load(t *testing.T, mesh string) *config.Config {
	t.Helper()
	c, err := config.Load([]byte(mesh))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestSchedulersShareByConfig: configs with the same pools and classes
// share one scheduler (capacity is per process, not per parsed config);
// a different setting gets its own; scheduler_service gets a client.
func TestSchedulersShareByConfig(t *testing.T) {
	var s Schedulers
	defer s.Close()
	a1, err := s.NewAdmitter(load(t, testMesh("fifo", "")))
	if err != nil {
		t.Fatal(err)
	}
	a2, _ := s.NewAdmitter(load(t, testMesh("fifo", `, "relocation": {"http": [{"header": "x"}]}`)))
	b, _ := s.NewAdmitter(load(t, testMesh("preemptive", "")))
	if a1 != a2 {
		t.Error("same scheduling settings got two schedulers")
	}
	if a1 == b {
		t.Error("different policies share a scheduler")
	}
	c, err := s.NewAdmitter(load(t, testMesh("fifo", `, "scheduler_service": {"address": "127.0.0.1:1", "failure_mode": "fail_closed"}`)))
	if err != nil {
		t.Fatal(err)
	}
	if c == a1 || c == nil {
		t.Errorf("scheduler_service config got %T", c)
	}
}

// TestTelemetryRecorder: no OTLP endpoint, no recorder; with one, a
// recorder that accepts observations and shuts down cleanly. The
// "collector" is a gRPC server on loopback without the OTLP services: the
// export is refused at once (Unimplemented) instead of being retried.
func TestTelemetryRecorder(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()
	var tel Telemetry
	r, err := tel.NewRecorder(load(t, testMesh("fifo", "")))
	if err != nil || r != nil {
		t.Fatalf("without OTLP: %v, %v", r, err)
	}
	r, err = tel.NewRecorder(load(t, testMesh("fifo", `, "telemetry": {"otlp": {"endpoint": "`+ln.Addr().String()+`", "insecure": true}}`)))
	if err != nil || r == nil {
		t.Fatalf("with OTLP: %v, %v", r, err)
	}
	now := time.Now()
	r.Record(filter.Record{Observation: filter.Observation{Received: now, FirstToken: now.Add(time.Millisecond), End: now.Add(time.Second), HasTTFT: true, TTFT: time.Millisecond}, Class: "batch", Model: "m"})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = tel.Shutdown(ctx) // the refused export is an error; what matters is that it returns
	if ctx.Err() != nil {
		t.Error("Shutdown did not return before its deadline")
	}
}
