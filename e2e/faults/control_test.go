package faults

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/llmesh/llmesh/cmd/llmesh/controlproc"
	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/testkit/proctest"
)

// plane is a running control plane; it serves until the test ends or
// serve.Stop.
type plane struct {
	addr  string
	serve *proctest.Task
}

func startPlane(t *testing.T, path, addr string) (*plane, error) {
	t.Helper()
	cp, err := controlproc.New(controlproc.Config{ConfigPath: path})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("control listen %s: %v", addr, err)
	}
	serve := proctest.Go(t, "control Serve", func(ctx context.Context) error { return cp.Serve(ctx, ln, nil) })
	return &plane{addr: ln.Addr().String(), serve: serve}, nil
}

// xdsClient is what Envoy does: one ADS stream subscribing to every
// listener, ACKing what it gets.
type xdsClient struct {
	conn   *grpc.ClientConn
	stream discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	cancel context.CancelFunc
}

func dialXDS(t *testing.T, addr string) *xdsClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	st, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		cancel()
		conn.Close()
		t.Fatal(err)
	}
	c := &xdsClient{conn: conn, stream: st, cancel: cancel}
	t.Cleanup(c.close)
	return c
}

func (c *xdsClient) close() {
	c.cancel()
	c.conn.Close()
}

// listeners subscribes to LDS and returns the first answer, ACKed.
func (c *xdsClient) listeners(t *testing.T) *discovery.DiscoveryResponse {
	t.Helper()
	node := &core.Node{Id: "faults-envoy", Cluster: "faults"}
	if err := c.stream.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: resource.ListenerType}); err != nil {
		t.Fatal(err)
	}
	r, err := c.stream.Recv()
	if err != nil {
		t.Fatalf("LDS: %v", err)
	}
	if err := c.stream.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: resource.ListenerType, VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce()}); err != nil {
		t.Fatal(err)
	}
	if len(r.GetResources()) == 0 {
		t.Fatal("LDS answered no listener")
	}
	return r
}

// TestControlPlaneDown stops the control plane under a subscribed data
// plane, breaks the mesh file while it is down, and brings it back. The
// data plane's stream ends (EOF on a graceful stop, UNAVAILABLE on a
// crash: Envoy then keeps its last good config and retries); a control plane restarted on the broken file
// refuses to start, naming the field, rather than serving something else;
// restarted on the repaired file it serves exactly the listeners the data
// plane already had, so reconnecting changes nothing.
func TestControlPlaneDown(t *testing.T) {
	good := meshYAML("127.0.0.1:8000")
	path := proctest.WriteTemp(t, "mesh.yaml", good)
	first, err := startPlane(t, path, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := first.addr
	c := dialXDS(t, addr)
	held := c.listeners(t)

	if err := first.serve.Stop(); err != nil {
		t.Errorf("control Serve: %v", err)
	}
	if _, err := c.stream.Recv(); err == nil {
		t.Error("data plane's stream got a response from a stopped control plane")
	} else if code := status.Code(err); err != io.EOF && code != codes.Unavailable && code != codes.Canceled {
		t.Errorf("data plane's stream ended with %v, want end of stream or UNAVAILABLE", err)
	}

	proctest.Replace(t, path, strings.Replace(good, "max_inflight: 8", "max_inflight: -3", 1))
	if _, err := startPlane(t, path, addr); err == nil {
		t.Fatal("control plane started on an invalid file")
	} else if fe := (config.Errors)(nil); !errors.As(err, &fe) || !strings.Contains(err.Error(), "pools[0].capacity.max_inflight") {
		t.Errorf("start on an invalid file: %v, want a config error naming pools[0].capacity.max_inflight", err)
	}

	proctest.Replace(t, path, good)
	if _, err := startPlane(t, path, addr); err != nil {
		t.Fatal(err)
	}
	c2 := dialXDS(t, addr)
	got := c2.listeners(t)
	if len(got.GetResources()) != len(held.GetResources()) {
		t.Fatalf("restarted control plane serves %d listeners, the data plane held %d", len(got.GetResources()), len(held.GetResources()))
	}
	for i := range got.GetResources() {
		if !proto.Equal(got.GetResources()[i], held.GetResources()[i]) {
			t.Errorf("listener %d differs after the restart", i)
		}
	}
}
