package server_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/llmesh/llmesh/api/schedulerv1"
	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/client"
	"github.com/llmesh/llmesh/scheduler/server"
	"github.com/llmesh/llmesh/testkit/proctest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const mesh = `
pools:
  - name: gpu
    protocol: openai
    endpoints: [127.0.0.1:1]
    capacity: {max_inflight: 1}
    scheduler: {policy: fifo}
classes:
  - {name: default, priority: 0, queue: {max_length: 1}}
`

func start(t *testing.T) (string, func()) { return startWith(t, server.Options{}) }

func startWith(t testing.TB, o server.Options) (string, func()) {
	t.Helper()
	return startMesh(t, mesh, o)
}

func startMesh(t testing.TB, src string, o server.Options) (string, func()) {
	t.Helper()
	c, err := config.Load([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		o.Mesh, o.Ready = c, func(a net.Addr) { ready <- a.String() }
		done <- server.Run(ctx, l, o)
	}()
	select {
	case addr := <-ready:
		return addr, func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		}
	case err := <-done:
		cancel()
		t.Fatalf("Run ended early: %v", err)
	}
	return "", nil
}

func TestRunServesMesh(t *testing.T) {
	addr, stop := start(t)
	defer stop()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	hr, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || hr.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v %v", hr, err)
	}

	// Both session transports on the one address.
	for _, tr := range []string{client.TransportGRPC, client.TransportFramed} {
		c, err := client.New(addr, client.Options{Transport: tr})
		if err != nil {
			t.Fatal(err)
		}
		l, err := c.Admit(ctx, scheduler.Request{Class: "default"})
		if err != nil {
			t.Fatalf("%s: %v", tr, err)
		}
		if l.QueueTime() < 0 {
			t.Fatalf("%s: queue time %v", tr, l.QueueTime())
		}
		l.Release(scheduler.Done)
		c.Close()
	}
}

// The service serves every experiment arm's pool under the name the Envoy
// filter admits to (control gives each arm a pool of its own).
func TestRunServesArmPools(t *testing.T) {
	addr, stop := startMesh(t, mesh+`
experiments:
  - name: trial
    pool: gpu
    arms: [{name: control}, {name: edf, scheduler: {policy: edf}}]
`, server.Options{})
	defer stop()
	c, err := client.New(addr, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, pool := range []string{"gpu", config.ArmPoolName("gpu", "control"), config.ArmPoolName("gpu", "edf")} {
		l, err := c.Admit(ctx, scheduler.Request{Pool: pool, Class: "default"})
		if err != nil {
			t.Fatalf("admit to pool %q: %v", pool, err)
		}
		l.Release(scheduler.Done)
	}
	if _, err := c.Admit(ctx, scheduler.Request{Pool: config.ArmPoolName("gpu", "nope"), Class: "default"}); !errors.Is(err, scheduler.ErrRejected) {
		t.Fatalf("admit to an unknown arm pool: %v, want ErrRejected", err)
	}
}

// A stream whose first message is not start is refused with a clear error.
func TestProtocolErrors(t *testing.T) {
	addr, stop := start(t)
	defer stop()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	api := schedulerv1.NewSchedulerClient(conn)
	for _, tc := range []struct {
		first *schedulerv1.AdmitRequest
		want  string
	}{
		{&schedulerv1.AdmitRequest{Msg: &schedulerv1.AdmitRequest_Done{Done: &schedulerv1.Done{}}}, "first message must be start"},
		{&schedulerv1.AdmitRequest{Msg: &schedulerv1.AdmitRequest_Start{Start: &schedulerv1.Start{AgeNs: -5}}}, "start.age_ns -5"},
	} {
		s, err := api.Admit(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Send(tc.first); err != nil {
			t.Fatal(err)
		}
		_, err = s.Recv()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Recv after %v: %v, want %q", tc.first, err, tc.want)
		}
	}
	// Ending the stream right after start, before admission, leaves
	// nothing behind: the next request is admitted at once.
	s, err := api.Admit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(&schedulerv1.AdmitRequest{Msg: &schedulerv1.AdmitRequest_Start{Start: &schedulerv1.Start{}}}); err != nil {
		t.Fatal(err)
	}
	if m, err := s.Recv(); err != nil || m.GetAdmitted() == nil {
		t.Fatalf("admitted: %v %v", m, err)
	}
	if err := s.CloseSend(); err != nil { // EOF without done: released as cancelled
		t.Fatal(err)
	}
	c, err := client.New(addr, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.Admit(ctx, scheduler.Request{})
	if err != nil {
		t.Fatal(err)
	}
	l.Release(scheduler.Done)
}

// A reload the schedulers cannot take (here: after Close) is logged and
// returned; the running config stays.
func TestServiceReloadRejected(t *testing.T) {
	var log proctest.Buffer
	c := mustLoad(t, mesh)
	svc, err := server.NewService(server.Options{Mesh: c, Log: &log})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Close(); err != nil {
		t.Fatal(err)
	}
	if err := svc.Reload(mustLoad(t, reloadMesh("2", "fifo"))); !errors.Is(err, scheduler.ErrClosed) {
		t.Errorf("Reload after Close: %v, want ErrClosed", err)
	}
	if !strings.Contains(log.String(), "scheduler: config change rejected; keeping the running config: ") {
		t.Errorf("rejection not logged:\n%s", log.String())
	}
	if svc.Mesh() != c {
		t.Error("the running config changed")
	}
}

func TestRunNeedsMesh(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := server.Run(context.Background(), l, server.Options{}); err == nil || !strings.Contains(err.Error(), "mesh config is required") {
		t.Fatalf("Run without mesh: %v", err)
	}
}

// metricsOn serves GET /metrics of a fresh registry on l until the test
// ends, and returns the registry for the service to register in (the
// command's admin server does this in a process: cmd/llmesh/schedserve).
func metricsOn(t testing.TB, l net.Listener) *prometheus.Registry {
	t.Helper()
	reg := prometheus.NewRegistry()
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = hs.Serve(l)
	}()
	t.Cleanup(func() {
		hs.Close()
		<-done
	})
	return reg
}

// The service's metrics go to the registry it is given.
func TestServiceMetrics(t *testing.T) {
	admin, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr, stop := startWith(t, server.Options{Registry: metricsOn(t, admin)})
	defer stop()
	c, err := client.New(addr, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := c.Admit(ctx, scheduler.Request{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(scheduler.Done)
	resp, err := http.Get("http://" + admin.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`llmesh_scheduler_limit{pool="gpu"} 1`,
		`llmesh_scheduler_inflight{pool="gpu"} 1`,
		`llmesh_scheduler_queued{class="default",pool="gpu"} 0`,
		`llmesh_scheduler_events_total{event="admitted",pool="gpu"} 1`,
		`llmesh_scheduler_endpoint_inflight{endpoint="127.0.0.1:1",pool="gpu"} 1`,
		`llmesh_scheduler_endpoint_limit{endpoint="127.0.0.1:1",pool="gpu"} 1`,
		`llmesh_scheduler_endpoint_running{endpoint="127.0.0.1:1",pool="gpu"} 0`,
		`llmesh_scheduler_endpoint_kv_usage{endpoint="127.0.0.1:1",pool="gpu"} 0`,
		`llmesh_scheduler_service_sessions 1`,
		"llmesh_scheduler_service_messages_received_total 1\n",
		"llmesh_scheduler_service_messages_sent_total 1\n",
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q:\n%s", want, body)
		}
	}
}
