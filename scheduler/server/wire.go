package server

import (
	"errors"
	"fmt"
	"slices"
	"unicode/utf8"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/llmesh/llmesh/api/schedulerv1"
	"github.com/llmesh/llmesh/kvblock"
	"github.com/llmesh/llmesh/scheduler"
)

// A Session's messages are decoded by hand into structures the session
// reuses: the generated code allocates a message, a oneof wrapper and a
// body for every lease's message, and a string for every name, about half
// the service's allocations per admission. codec (GRPCOptions) hands the
// service a SessionRequest's bytes instead of decoding them, and a framed
// connection hands over its frame's bytes (RecvRaw); a server without the
// codec (grpc.NewServer() and Register) decodes as usual, and the session
// takes the decoded message.

// codec is gRPC's proto codec except for a session's requests (wireRequest),
// which it keeps as bytes.
type codec struct{ encoding.CodecV2 }

func newCodec() codec { return codec{encoding.GetCodecV2("proto")} }

func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	if r, ok := v.(*wireRequest); ok {
		n := data.Len()
		r.raw = slices.Grow(r.raw[:0], n)[:n]
		data.CopyTo(r.raw)
		r.isRaw = true
		return nil
	}
	return c.CodecV2.Unmarshal(data, v)
}

// wireRequest is what a session receives into: the message's bytes when
// codec runs, else the message the proto codec decoded (the embedded
// SessionRequest, which makes it a proto.Message).
type wireRequest struct {
	schedulerv1.SessionRequest
	raw   []byte
	isRaw bool
}

// leaseMsg is one LeaseRequest: kind says which of its oneof it holds.
type leaseMsg struct {
	lease uint64
	kind  msgKind
	start startMsg
	// Progress
	firstToken bool
	tokens     uint32
	// Done
	outcome schedulerv1.Outcome
}

type msgKind uint8

const (
	kindNone msgKind = iota
	kindStart
	kindProgress
	kindDone
)

// startMsg is a Start's fields.
type startMsg struct {
	id, pool, class, affinity string
	promptTokens, maxTokens   uint32
	ageNs                     int64
	requeue                   bool
	// blocks holds at most scheduler.MaxBlocks+1 of the Start's blocks
	// (one more than allowed, so that the excess is seen without keeping
	// it); nBlocks counts them all. A fresh slice per Start: the
	// scheduler keeps it while the request waits.
	blocks  []kvblock.Hash
	nBlocks int
}

func (s *startMsg) addBlock(h uint64) {
	s.nBlocks++
	if len(s.blocks) <= scheduler.MaxBlocks {
		s.blocks = append(s.blocks, kvblock.Hash(h))
	}
}

func startOf(s *schedulerv1.Start) startMsg {
	m := startMsg{id: s.GetId(), pool: s.GetPool(), class: s.GetClass(), affinity: s.GetAffinity(),
		promptTokens: s.GetPromptTokens(), maxTokens: s.GetMaxTokens(), ageNs: s.GetAgeNs(), requeue: s.GetRequeue()}
	if bs := s.GetBlocks(); len(bs) > 0 {
		m.blocks = make([]kvblock.Hash, 0, min(len(bs), scheduler.MaxBlocks+1))
		for _, h := range bs {
			m.addBlock(h)
		}
	}
	return m
}

// leaseMsgOf is a decoded LeaseRequest's leaseMsg.
func leaseMsgOf(r *schedulerv1.LeaseRequest) leaseMsg {
	m := leaseMsg{lease: r.GetLease()}
	switch msg := r.GetMsg().(type) {
	case *schedulerv1.LeaseRequest_Start:
		m.kind, m.start = kindStart, startOf(msg.Start)
	case *schedulerv1.LeaseRequest_Progress:
		m.kind, m.firstToken, m.tokens = kindProgress, msg.Progress.GetFirstToken(), msg.Progress.GetTokens()
	case *schedulerv1.LeaseRequest_Done:
		m.kind, m.outcome = kindDone, msg.Done.GetOutcome()
	}
	return m
}

// names interns the pool and class names of a session's Starts: a proxy
// sends the same few again and again, so a lookup (which does not
// allocate) replaces a string per Start. It stops growing at maxNames.
type names map[string]string

const maxNames = 256

func (n names) intern(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if s, ok := n[string(b)]; ok {
		return s
	}
	s := string(b)
	if len(n) < maxNames {
		n[s] = s
	}
	return s
}

var errWire = errors.New("malformed message")

// decodeSessionRequest decodes a SessionRequest's bytes into msgs (reused:
// its elements are overwritten), with the proto codec's semantics: fields
// in any order, unknown fields skipped, a known field of another wire type
// taken as unknown, the last of a oneof's fields wins and a repeated
// message field merges, strings must be UTF-8.
func decodeSessionRequest(b []byte, msgs []leaseMsg, n names) ([]leaseMsg, error) {
	msgs = msgs[:0]
	for len(b) > 0 {
		num, typ, l := consumeTag(b)
		if l < 0 {
			return msgs, fmt.Errorf("%w: session_request: %w", errWire, protowire.ParseError(l))
		}
		b = b[l:]
		if num == 1 && typ == protowire.BytesType {
			v, l := protowire.ConsumeBytes(b)
			if l < 0 {
				return msgs, fmt.Errorf("%w: session_request.leases: %w", errWire, protowire.ParseError(l))
			}
			b = b[l:]
			msgs = append(msgs, leaseMsg{})
			if err := decodeLeaseRequest(v, &msgs[len(msgs)-1], n); err != nil {
				return msgs, err
			}
			continue
		}
		l = protowire.ConsumeFieldValue(num, typ, b)
		if l < 0 {
			return msgs, fmt.Errorf("%w: session_request: field %d: %w", errWire, num, protowire.ParseError(l))
		}
		b = b[l:]
	}
	return msgs, nil
}

func decodeLeaseRequest(b []byte, m *leaseMsg, n names) error {
	for len(b) > 0 {
		num, typ, l := consumeTag(b)
		if l < 0 {
			return fmt.Errorf("%w: lease_request: %w", errWire, protowire.ParseError(l))
		}
		b = b[l:]
		switch {
		case num == 1 && typ == protowire.VarintType:
			v, l := protowire.ConsumeVarint(b)
			if l < 0 {
				return fmt.Errorf("%w: lease_request.lease: %w", errWire, protowire.ParseError(l))
			}
			b, m.lease = b[l:], v
			continue
		case num >= 2 && num <= 4 && typ == protowire.BytesType:
			v, l := protowire.ConsumeBytes(b)
			if l < 0 {
				return fmt.Errorf("%w: lease_request: field %d: %w", errWire, num, protowire.ParseError(l))
			}
			b = b[l:]
			kind := msgKind(num - 1) // 2 start, 3 progress, 4 done
			if m.kind != kind {
				// Another of the oneof's fields: it replaces the one before.
				m.kind, m.start, m.firstToken, m.tokens, m.outcome = kind, startMsg{}, false, 0, 0
			}
			var err error
			switch kind {
			case kindStart:
				err = decodeStart(v, &m.start, n)
			case kindProgress:
				err = decodeScalars(v, "progress", func(num protowire.Number, x uint64) {
					switch num {
					case 1:
						m.firstToken = x != 0
					case 2:
						m.tokens = uint32(x)
					}
				})
			case kindDone:
				err = decodeScalars(v, "done", func(num protowire.Number, x uint64) {
					if num == 1 {
						m.outcome = schedulerv1.Outcome(int32(x))
					}
				})
			}
			if err != nil {
				return err
			}
			continue
		}
		l = protowire.ConsumeFieldValue(num, typ, b)
		if l < 0 {
			return fmt.Errorf("%w: lease_request: field %d: %w", errWire, num, protowire.ParseError(l))
		}
		b = b[l:]
	}
	return nil
}

func decodeStart(b []byte, s *startMsg, n names) error {
	for len(b) > 0 {
		num, typ, l := consumeTag(b)
		if l < 0 {
			return fmt.Errorf("%w: start: %w", errWire, protowire.ParseError(l))
		}
		b = b[l:]
		var err error
		switch {
		case (num == 1 || num == 2 || num == 3 || num == 8) && typ == protowire.BytesType:
			l, err = decodeStartString(b, num, s, n)
		case num == 9 && typ == protowire.BytesType:
			l, err = decodeStartBlocks(b, s)
		case num >= 4 && num <= 7 && typ == protowire.VarintType || num == 9 && typ == protowire.VarintType:
			l, err = decodeStartVarint(b, num, s)
		default:
			if l = protowire.ConsumeFieldValue(num, typ, b); l < 0 {
				err = fmt.Errorf("%w: start: field %d: %w", errWire, num, protowire.ParseError(l))
			}
		}
		if err != nil {
			return err
		}
		b = b[l:]
	}
	return nil
}

// decodeStartString decodes a Start's string field num (id, pool, class,
// affinity) from b and returns the bytes it took.
func decodeStartString(b []byte, num protowire.Number, s *startMsg, n names) (int, error) {
	v, l := protowire.ConsumeBytes(b)
	if l < 0 {
		return 0, fmt.Errorf("%w: start: field %d: %w", errWire, num, protowire.ParseError(l))
	}
	if !utf8.Valid(v) {
		return 0, fmt.Errorf("%w: start: field %d: a string that is not UTF-8", errWire, num)
	}
	switch num {
	case 1:
		s.id = string(v)
	case 2:
		s.pool = n.intern(v)
	case 3:
		s.class = n.intern(v)
	case 8:
		s.affinity = string(v)
	}
	return l, nil
}

// decodeStartBlocks decodes a Start's packed blocks (what proto3 writers
// send) and returns the bytes it took.
func decodeStartBlocks(b []byte, s *startMsg) (int, error) {
	v, l := protowire.ConsumeBytes(b)
	if l < 0 {
		return 0, fmt.Errorf("%w: start.blocks: %w", errWire, protowire.ParseError(l))
	}
	if s.blocks == nil && len(v) > 0 {
		s.blocks = make([]kvblock.Hash, 0, min(len(v), scheduler.MaxBlocks+1))
	}
	for len(v) > 0 {
		x, vl := protowire.ConsumeVarint(v)
		if vl < 0 {
			return 0, fmt.Errorf("%w: start.blocks: %w", errWire, protowire.ParseError(vl))
		}
		v = v[vl:]
		s.addBlock(x)
	}
	return l, nil
}

// decodeStartVarint decodes a Start's varint field num (an unpacked
// element of blocks included) and returns the bytes it took.
func decodeStartVarint(b []byte, num protowire.Number, s *startMsg) (int, error) {
	x, l := protowire.ConsumeVarint(b)
	if l < 0 {
		return 0, fmt.Errorf("%w: start: field %d: %w", errWire, num, protowire.ParseError(l))
	}
	switch num {
	case 4:
		s.promptTokens = uint32(x)
	case 5:
		s.maxTokens = uint32(x)
	case 6:
		s.ageNs = int64(x)
	case 7:
		s.requeue = x != 0
	case 9:
		s.addBlock(x) // one unpacked element of blocks
	}
	return l, nil
}

// decodeScalars decodes a message whose known fields (1 and 2) are all
// varints, handing each to set.
func decodeScalars(b []byte, what string, set func(protowire.Number, uint64)) error {
	for len(b) > 0 {
		num, typ, l := consumeTag(b)
		if l < 0 {
			return fmt.Errorf("%w: %s: %w", errWire, what, protowire.ParseError(l))
		}
		b = b[l:]
		if (num == 1 || num == 2) && typ == protowire.VarintType {
			x, l := protowire.ConsumeVarint(b)
			if l < 0 {
				return fmt.Errorf("%w: %s: field %d: %w", errWire, what, num, protowire.ParseError(l))
			}
			b = b[l:]
			set(num, x)
			continue
		}
		l = protowire.ConsumeFieldValue(num, typ, b)
		if l < 0 {
			return fmt.Errorf("%w: %s: field %d: %w", errWire, what, num, protowire.ParseError(l))
		}
		b = b[l:]
	}
	return nil
}

// consumeTag is protowire.ConsumeTag with protobuf's bound on field
// numbers, which protowire leaves to its callers.
func consumeTag(b []byte) (protowire.Number, protowire.Type, int) {
	num, typ, l := protowire.ConsumeTag(b)
	if l >= 0 && num > protowire.MaxValidNumber {
		return 0, 0, -1 // reported as protowire's generic parse error
	}
	return num, typ, l
}
