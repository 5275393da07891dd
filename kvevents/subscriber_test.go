package kvevents

import (
	"context"
	"encoding/binary"
	"sync"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/llmesh/llmesh/kvblock"
	"github.com/llmesh/llmesh/testkit/wait"
)

// countSink counts what a view tells it; safe for the subscriber's
// goroutine and the test's.
type countSink struct {
	mu                       sync.Mutex
	stored, removed, cleared int
}

func (c *countSink) Stored(b []kvblock.Hash)  { c.mu.Lock(); c.stored += len(b); c.mu.Unlock() }
func (c *countSink) Removed(b []kvblock.Hash) { c.mu.Lock(); c.removed += len(b); c.mu.Unlock() }
func (c *countSink) Cleared()                 { c.mu.Lock(); c.cleared++; c.mu.Unlock() }
func (c *countSink) get() (int, int, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stored, c.removed, c.cleared
}

func storedBatch(h uint64) []byte {
	toks := make([]uint32, 16)
	for i := range toks {
		toks[i] = uint32(h)*100 + uint32(i)
	}
	return Encode(Batch{TS: 1, DPRank: 0, Events: []Event{{Kind: BlockStored, Hashes: []uint64{h}, Tokens: toks, BlockSize: 16}}})
}

func send(t *testing.T, pub zmq4.Socket, topic string, seq uint64, payload []byte) {
	t.Helper()
	var s [8]byte
	binary.BigEndian.PutUint64(s[:], seq)
	if err := pub.SendMulti(zmq4.NewMsgFrom([]byte(topic), s[:], payload)); err != nil {
		t.Fatal(err)
	}
}

// A subscriber applies batches in order, clears the engine's view on a
// sequence gap, on a restarted publisher's sequence and on a malformed
// payload, ignores other topics, and redials a publisher that went away.
func TestSubscriberGapsRestartsAndRedials(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pub := zmq4.NewPub(ctx)
	if err := pub.Listen("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	addr := pub.Addr().String()
	sink := &countSink{}
	sub := &Subscriber{Endpoint: "tcp://" + addr, Topic: "kv", View: NewView(16, sink), Retry: 10 * time.Millisecond}
	done := make(chan error, 1)
	go func() { done <- sub.Run(ctx) }()

	// Until the subscription reaches the publisher, PUB drops messages:
	// publish until one lands (the first one seen is no gap, whatever
	// its number); later ones arrive in order.
	seq := uint64(0)
	wait.Until(t, "the first batch", func() bool {
		send(t, pub, "kv", seq, storedBatch(1))
		seq++
		return sub.Stats().Batches > 0
	})
	send(t, pub, "other", seq+7, storedBatch(9)) // another topic: filtered
	send(t, pub, "kv", seq, storedBatch(2))
	send(t, pub, "kv", seq+4, storedBatch(3)) // 3 lost
	wait.Until(t, "the gap", func() bool { return sub.Stats().Gaps == 1 })
	if _, _, cl := sink.get(); cl != 1 {
		t.Fatalf("cleared %d times after one gap", cl)
	}
	send(t, pub, "kv", seq+5, []byte{0xc1}) // malformed
	wait.Until(t, "the malformed batch", func() bool { return sub.Stats().Malformed == 1 })
	pub.Close()

	// The engine restarts on the same port and counts from 0 again.
	pub2 := zmq4.NewPub(ctx)
	// The old listener's port is released asynchronously.
	wait.Poll{Interval: 10 * time.Millisecond}.UntilNil(t, "the old port to listen on again", func() error {
		return pub2.Listen("tcp://" + addr)
	})
	defer pub2.Close()
	// Its seq 0 is behind the last seen: a gap (each repeat of 0 too).
	wait.Until(t, "the restarted publisher's batch", func() bool {
		send(t, pub2, "kv", 0, storedBatch(4))
		return sub.Stats().Gaps >= 2
	})
	st, _, cl := sink.get()
	if cl < 3 {
		t.Errorf("cleared %d times, want at least 3 (gap, malformed, restart)", cl)
	}
	if st < 3 {
		t.Errorf("stored %d blocks, want at least 3", st)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}

func TestSubscriberBadEndpoint(t *testing.T) {
	for _, ep := range []string{"udp://127.0.0.1:1", "tcp://*:5557", "tcp://h", ""} {
		sub := &Subscriber{Endpoint: ep, View: NewView(16, &countSink{})}
		if err := sub.Run(context.Background()); err == nil {
			t.Errorf("endpoint %q accepted", ep)
		}
	}
}
