package control

import (
	"context"
	"log/slog"
	"sort"
	"sync"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"

	"github.com/llmesh/llmesh/clock"
)

// TypeStatus is what one node did with one resource type.
type TypeStatus struct {
	// TypeURL is the xDS type.
	TypeURL string `json:"type_url"`
	// Sent is the last version sent to the node.
	Sent string `json:"sent,omitempty"`
	// Acked is the last version the node accepted.
	Acked string `json:"acked,omitempty"`
	// Nacked is the last version the node rejected, "" if none since the
	// last ACK of a newer version.
	Nacked string `json:"nacked,omitempty"`
	// Error is the node's message for the rejection.
	Error string `json:"error,omitempty"`
	// Updated is when this entry last changed.
	Updated time.Time `json:"updated"`
}

// NodeStatus is the xDS state of one connected (or recently connected)
// node.
type NodeStatus struct {
	ID      string       `json:"id"`
	Cluster string       `json:"cluster,omitempty"`
	Streams int          `json:"streams"`
	Types   []TypeStatus `json:"types"`
}

// nodeTracker records per-node ACK/NACK state from the xDS server's
// callbacks. Its mutex guards everything in it; callbacks run on the xDS
// server's stream goroutines.
type nodeTracker struct {
	clk clock.Clock
	log *slog.Logger

	mu sync.Mutex
	// streams maps a stream to its node: Envoy sends the node only on the
	// first request of a stream.
	streams map[int64]*core.Node
	// nonces maps (stream, nonce) to the version that response carried, to
	// name the version a NACK rejects.
	nonces map[int64]map[string]string
	nodes  map[string]*nodeState
	// nacks counts NACKs seen, for tests and the admin page.
	nacks int
}

type nodeState struct {
	cluster string
	streams int
	types   map[string]*TypeStatus
	// seen is when the node last opened or used a stream, to forget the
	// longest-gone disconnected nodes first.
	seen time.Time
}

// maxNodes bounds the nodes remembered; beyond it disconnected nodes are
// forgotten, oldest first, so churning proxies cannot grow memory forever.
const maxNodes = 4096

func newNodeTracker(clk clock.Clock, log *slog.Logger) *nodeTracker {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &nodeTracker{
		clk:     clk,
		log:     log,
		streams: map[int64]*core.Node{},
		nonces:  map[int64]map[string]string{},
		nodes:   map[string]*nodeState{},
	}
}

var _ serverv3.Callbacks = (*nodeTracker)(nil)

func (t *nodeTracker) node(id string, cluster string) *nodeState {
	n := t.nodes[id]
	if n == nil {
		n = &nodeState{cluster: cluster, types: map[string]*TypeStatus{}}
		t.nodes[id] = n
	}
	return n
}

func (n *nodeState) typ(url string) *TypeStatus {
	s := n.types[url]
	if s == nil {
		s = &TypeStatus{TypeURL: url}
		n.types[url] = s
	}
	return s
}

// OnStreamOpen implements serverv3.Callbacks.
func (t *nodeTracker) OnStreamOpen(context.Context, int64, string) error { return nil }

// OnStreamClosed implements serverv3.Callbacks.
func (t *nodeTracker) OnStreamClosed(id int64, _ *core.Node) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n := t.streams[id]; n != nil {
		if s := t.nodes[n.GetId()]; s != nil && s.streams > 0 {
			s.streams--
		}
	}
	delete(t.streams, id)
	delete(t.nonces, id)
}

// OnStreamRequest implements serverv3.Callbacks: it turns each request
// into an ACK or NACK of the version last sent with that nonce.
func (t *nodeTracker) OnStreamRequest(id int64, req *discovery.DiscoveryRequest) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := t.streams[id]
	if n == nil {
		n = req.GetNode()
		if n == nil {
			n = &core.Node{Id: "unknown"}
		}
		t.streams[id] = n
		ns := t.node(n.GetId(), n.GetCluster())
		ns.streams++
		ns.seen = t.clk.Now()
		t.prune()
	}
	if req.GetResponseNonce() == "" {
		return nil // a subscription, not an answer
	}
	st := t.node(n.GetId(), n.GetCluster()).typ(req.GetTypeUrl())
	st.Updated = t.clk.Now()
	if d := req.GetErrorDetail(); d != nil {
		t.nacks++
		st.Nacked = t.nonces[id][req.GetResponseNonce()]
		st.Error = d.GetMessage()
		t.log.Warn("node rejected a snapshot (NACK)", "node", n.GetId(), "type", req.GetTypeUrl(),
			"version", st.Nacked, "error", d.GetMessage())
		return nil
	}
	st.Acked = req.GetVersionInfo()
	if st.Nacked != "" && st.Acked == t.nonces[id][req.GetResponseNonce()] {
		// The node accepted a newer version after rejecting one.
		st.Nacked, st.Error = "", ""
	}
	return nil
}

// OnStreamResponse implements serverv3.Callbacks.
func (t *nodeTracker) OnStreamResponse(_ context.Context, id int64, req *discovery.DiscoveryRequest, resp *discovery.DiscoveryResponse) {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := t.nonces[id]
	if m == nil {
		m = map[string]string{}
		t.nonces[id] = m
	}
	// Only the latest nonce per type matters; keep the map small.
	if len(m) > 64 {
		clear(m)
	}
	m[resp.GetNonce()] = resp.GetVersionInfo()
	if n := t.streams[id]; n != nil {
		st := t.node(n.GetId(), n.GetCluster()).typ(resp.GetTypeUrl())
		st.Sent = resp.GetVersionInfo()
		st.Updated = t.clk.Now()
	}
}

// OnFetchRequest implements serverv3.Callbacks (REST fetches are not
// tracked).
func (t *nodeTracker) OnFetchRequest(context.Context, *discovery.DiscoveryRequest) error { return nil }

// OnFetchResponse implements serverv3.Callbacks.
func (t *nodeTracker) OnFetchResponse(*discovery.DiscoveryRequest, *discovery.DiscoveryResponse) {}

// OnDeltaStreamOpen implements serverv3.Callbacks.
func (t *nodeTracker) OnDeltaStreamOpen(context.Context, int64, string) error { return nil }

// OnDeltaStreamClosed implements serverv3.Callbacks.
func (t *nodeTracker) OnDeltaStreamClosed(int64, *core.Node) {}

// OnStreamDeltaRequest implements serverv3.Callbacks; delta xDS is served
// but its ACK state is not tracked.
func (t *nodeTracker) OnStreamDeltaRequest(int64, *discovery.DeltaDiscoveryRequest) error {
	return nil
}

// OnStreamDeltaResponse implements serverv3.Callbacks.
func (t *nodeTracker) OnStreamDeltaResponse(int64, *discovery.DeltaDiscoveryRequest, *discovery.DeltaDiscoveryResponse) {
}

// prune forgets disconnected nodes beyond maxNodes, least recently seen
// first; t.mu is held.
func (t *nodeTracker) prune() {
	if len(t.nodes) <= maxNodes {
		return
	}
	type gone struct {
		id   string
		seen time.Time
	}
	var idle []gone
	for id, n := range t.nodes {
		if n.streams == 0 {
			idle = append(idle, gone{id, n.seen})
		}
	}
	sort.Slice(idle, func(i, j int) bool { return idle[i].seen.Before(idle[j].seen) })
	for i := 0; i < len(idle) && len(t.nodes) > maxNodes; i++ {
		delete(t.nodes, idle[i].id)
	}
}

// snapshot returns every node's status, sorted by node ID and type.
func (t *nodeTracker) snapshot() []NodeStatus {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]NodeStatus, 0, len(t.nodes))
	for id, n := range t.nodes {
		ns := NodeStatus{ID: id, Cluster: n.cluster, Streams: n.streams}
		for _, s := range n.types {
			ns.Types = append(ns.Types, *s)
		}
		sort.Slice(ns.Types, func(i, j int) bool { return ns.Types[i].TypeURL < ns.Types[j].TypeURL })
		out = append(out, ns)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}
