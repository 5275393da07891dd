package kvevents

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/llmesh/llmesh/clock"
)

// Subscriber follows one engine's KV-cache events over ZMQ SUB and applies
// them to its View. The socket redials by itself when the connection
// drops, for as long as Run's context lasts. Sequence numbers detect what
// was lost meanwhile: a batch whose number is not the one after the last
// (a gap: batches missed; or lower: the engine restarted) resets the view,
// telling its sink the engine's content is unknown, before the batch is
// applied; the view then fills again from new events.
type Subscriber struct {
	// Endpoint is the engine's PUB address, tcp://HOST:PORT.
	Endpoint string
	// Topic is the subscription prefix ("" receives every topic).
	Topic string
	// View receives the events; Run's goroutine owns it.
	View *View
	// Retry is the wait between dial attempts (0: 250ms) and after a
	// failed socket before a new one.
	Retry time.Duration
	// Clock times the wait after a failed socket (nil: the wall clock).
	Clock clock.Clock
	// Log gets dropped payloads and gaps (nil: discarded).
	Log *slog.Logger

	batches, gaps, malformed atomic.Uint64
}

// SubscriberStats counts what a Subscriber received.
type SubscriberStats struct {
	Batches, Gaps, Malformed uint64
}

// Stats is safe to call while Run runs.
func (s *Subscriber) Stats() SubscriberStats {
	return SubscriberStats{Batches: s.batches.Load(), Gaps: s.gaps.Load(), Malformed: s.malformed.Load()}
}

// Run receives until ctx ends and returns nil then; it returns an error
// at once for a bad Endpoint or a nil View.
func (s *Subscriber) Run(ctx context.Context) error {
	if s.View == nil {
		return errors.New("kvevents: subscriber without a view")
	}
	if !Connectable(s.Endpoint) {
		return fmt.Errorf("kvevents: endpoint %q must be tcp://HOST:PORT", s.Endpoint)
	}
	retry := s.Retry
	if retry <= 0 {
		retry = 250 * time.Millisecond
	}
	clk := s.Clock
	if clk == nil {
		clk = clock.Real{}
	}
	log := s.Log
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	next, synced := uint64(0), false
	for ctx.Err() == nil {
		err := s.session(ctx, retry, &next, &synced, log)
		if ctx.Err() != nil {
			return nil
		}
		log.Warn("kv events subscriber: socket failed, redialling", "endpoint", s.Endpoint, "err", err)
		t := clk.NewTimer(retry)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C():
		}
	}
	return nil
}

// session runs one socket until it fails or ctx ends.
func (s *Subscriber) session(ctx context.Context, retry time.Duration, next *uint64, synced *bool, log *slog.Logger) error {
	sck := zmq4.NewSub(ctx, zmq4.WithDialerRetry(retry), zmq4.WithDialerMaxRetries(-1), zmq4.WithAutomaticReconnect(true))
	defer sck.Close()
	if err := sck.SetOption(zmq4.OptionSubscribe, s.Topic); err != nil {
		return err
	}
	if err := sck.Dial(s.Endpoint); err != nil {
		return err
	}
	for {
		msg, err := sck.Recv()
		if err != nil {
			return err
		}
		if len(msg.Frames) != 3 || len(msg.Frames[1]) != 8 {
			s.malformed.Add(1)
			log.Warn("kv events: want 3 frames [topic, seq, payload]", "endpoint", s.Endpoint, "frames", len(msg.Frames))
			continue
		}
		seq := binary.BigEndian.Uint64(msg.Frames[1])
		if *synced && seq != *next {
			// Missed batches, or a restarted engine counting from 0.
			log.Warn("kv events: sequence gap, clearing the engine's view", "endpoint", s.Endpoint, "want", *next, "got", seq)
			s.View.Reset()
			s.gaps.Add(1) // counted once handled: Stats never runs ahead of the view
		}
		*next, *synced = seq+1, true
		b, err := Decode(msg.Frames[2])
		if err != nil {
			// What the batch changed is unknown: forget the engine's view
			// rather than keep one that may be wrong.
			log.Warn("kv events: dropping a malformed batch", "endpoint", s.Endpoint, "seq", seq, "err", err)
			s.View.Reset()
			s.malformed.Add(1)
			continue
		}
		s.View.Apply(&b)
		s.batches.Add(1)
	}
}
