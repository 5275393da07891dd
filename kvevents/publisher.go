package kvevents

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"sync"
	"sync/atomic"

	"github.com/go-zeromq/zmq4"
)

// Publisher sends batches as vLLM's ZMQ publisher does: PUB multipart
// messages [topic, 8-byte big-endian sequence number, payload], the
// sequence counting from 0. Publish only queues; one goroutine, started by
// NewPublisher and ended by Close, owns the socket and sends.
type Publisher struct {
	sck     zmq4.Socket
	topic   []byte
	q       chan queued
	seq     uint64 // next sequence number; only Publish's caller touches it
	dropped atomic.Uint64
	done    chan struct{}
	close   sync.Once
	cancel  context.CancelFunc
}

type queued struct {
	seq uint64
	b   Batch
}

// NewPublisher opens the PUB socket of c (binding a wildcard host,
// connecting otherwise) and starts the sending goroutine.
func NewPublisher(c Config) (*Publisher, error) {
	ctx, cancel := context.WithCancel(context.Background())
	sck := zmq4.NewPub(ctx)
	var err error
	if c.binds() {
		err = sck.Listen(c.Endpoint)
	} else {
		err = sck.Dial(c.Endpoint)
	}
	if err != nil {
		cancel()
		sck.Close()
		return nil, fmt.Errorf("kv events publisher: %w", err)
	}
	n := c.MaxQueueSize
	if n < 1 {
		n = DefaultMaxQueueSize
	}
	p := &Publisher{sck: sck, topic: []byte(c.Topic), q: make(chan queued, min(n, 1<<16)), done: make(chan struct{}), cancel: cancel}
	go p.send()
	return p, nil
}

// Addr is the bound address (nil when the publisher connects).
func (p *Publisher) Addr() net.Addr { return p.sck.Addr() }

// Dropped counts batches dropped because the queue was full.
func (p *Publisher) Dropped() uint64 { return p.dropped.Load() }

// Publish queues b, which the publisher now owns. It never blocks: with
// the queue full the batch is dropped, and its sequence number with it,
// so that subscribers see a gap. Calls must come from one goroutine (the
// engine loop) at a time.
func (p *Publisher) Publish(b Batch) {
	s := p.seq
	p.seq++
	select {
	case p.q <- queued{seq: s, b: b}:
	default:
		p.dropped.Add(1)
	}
}

func (p *Publisher) send() {
	defer close(p.done)
	for m := range p.q {
		var seq [8]byte
		binary.BigEndian.PutUint64(seq[:], m.seq)
		// A send fails only when the socket is closing; the batch is lost
		// as it would be to a subscriber that is not connected.
		_ = p.sck.SendMulti(zmq4.NewMsgFrom(p.topic, seq[:], Encode(m.b)))
	}
}

// Close sends what is queued, then closes the socket. Publish must not be
// called after it.
func (p *Publisher) Close() error {
	var err error
	p.close.Do(func() {
		close(p.q)
		<-p.done
		err = p.sck.Close()
		p.cancel()
	})
	return err
}
