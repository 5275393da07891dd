package control

import (
	"context"
	"fmt"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	status "google.golang.org/genproto/googleapis/rpc/status"

	"github.com/llmesh/llmesh/clock"
)

func TestNodeTrackerAckNackCycle(t *testing.T) {
	clk := clock.NewFake(time.Unix(1000, 0))
	tr := newNodeTracker(clk, nil)
	const typ = "type.googleapis.com/envoy.config.listener.v3.Listener"
	node := &core.Node{Id: "n1", Cluster: "c"}
	send := func(v, nonce string) {
		tr.OnStreamResponse(context.Background(), 7, nil, &discovery.DiscoveryResponse{TypeUrl: typ, VersionInfo: v, Nonce: nonce})
	}
	if err := tr.OnStreamRequest(7, &discovery.DiscoveryRequest{Node: node, TypeUrl: typ}); err != nil {
		t.Fatal(err)
	}
	send("1-a", "n1")
	_ = tr.OnStreamRequest(7, &discovery.DiscoveryRequest{TypeUrl: typ, VersionInfo: "1-a", ResponseNonce: "n1"})
	send("2-b", "n2")
	_ = tr.OnStreamRequest(7, &discovery.DiscoveryRequest{TypeUrl: typ, VersionInfo: "1-a", ResponseNonce: "n2",
		ErrorDetail: &status.Status{Message: "bad filter"}})
	got := tr.snapshot()[0].Types[0]
	if got.Acked != "1-a" || got.Nacked != "2-b" || got.Error != "bad filter" || got.Sent != "2-b" {
		t.Fatalf("after NACK: %+v", got)
	}
	send("3-c", "n3")
	_ = tr.OnStreamRequest(7, &discovery.DiscoveryRequest{TypeUrl: typ, VersionInfo: "3-c", ResponseNonce: "n3"})
	got = tr.snapshot()[0].Types[0]
	if got.Acked != "3-c" || got.Nacked != "" || got.Error != "" {
		t.Fatalf("after a newer ACK: %+v", got)
	}
	tr.OnStreamClosed(7, node)
	if s := tr.snapshot()[0]; s.Streams != 0 || s.ID != "n1" || s.Cluster != "c" {
		t.Fatalf("after close: %+v", s)
	}
}

func TestNodeTrackerForgetsOldDisconnectedNodes(t *testing.T) {
	clk := clock.NewFake(time.Unix(1000, 0))
	tr := newNodeTracker(clk, nil)
	for i := 0; i < maxNodes+10; i++ {
		clk.Advance(time.Second)
		id := int64(i)
		_ = tr.OnStreamRequest(id, &discovery.DiscoveryRequest{Node: &core.Node{Id: fmt.Sprint("n", i)}})
		if i != 0 { // n0 stays connected
			tr.OnStreamClosed(id, nil)
		}
	}
	ns := tr.snapshot()
	if len(ns) != maxNodes {
		t.Fatalf("%d nodes remembered, want %d", len(ns), maxNodes)
	}
	have := map[string]bool{}
	for _, n := range ns {
		have[n.ID] = true
	}
	if !have["n0"] || have["n1"] || !have[fmt.Sprint("n", maxNodes+9)] {
		t.Error("pruned the wrong nodes: want the connected one kept and the oldest disconnected gone")
	}
}
