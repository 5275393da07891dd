package gateway

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/llmesh/llmesh/testkit/gatewaytest"
)

func TestMain(m *testing.M) {
	if os.Getenv(benchProxyEnv) != "" { // a proxy for BenchmarkProxyProcessCPU
		os.Exit(benchProxyMain())
	}
	goleak.VerifyTestMain(m)
}

// recorder collects Records.
type recorder struct{ ch chan Record }

func newRecorder() *recorder { return &recorder{ch: make(chan Record, 64)} }

func (r *recorder) Record(rec Record) { r.ch <- rec }

// next waits for the next record.
func (r *recorder) next(t testing.TB) Record {
	t.Helper()
	select {
	case rec := <-r.ch:
		return rec
	case <-time.After(20 * time.Second):
		t.Fatal("no record within 20s")
	}
	return Record{}
}

// startGateway serves a gateway on 127.0.0.1:0 until the test ends.
func startGateway(t testing.TB, cfg Config, opts ...Option) (*Gateway, string) {
	t.Helper()
	g, err := New(cfg, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Serve(ctx, ln, 5*time.Second) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
		g.Close()
		if n := g.misuses.Load(); n != 0 {
			t.Errorf("%d request lifecycle calls refused (a host bug; see the log)", n)
		}
	})
	return g, "http://" + ln.Addr().String()
}

// The request helpers shared with the gateway process tests.
var (
	readSSE     = gatewaytest.ReadSSE
	sseUpstream = gatewaytest.SSEUpstream
	post        = gatewaytest.Post
	simMetric   = gatewaytest.SimMetric
	completion  = gatewaytest.Completion
	expMeshFor  = gatewaytest.ExpMeshFor
	complete    = gatewaytest.Complete
	mustReq     = gatewaytest.MustReq
)

const (
	expMesh   = gatewaytest.ExpMesh
	relocMesh = gatewaytest.RelocMesh
)
