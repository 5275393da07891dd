package relocate

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"fmt"
	"io"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"
)

// A gRPC message on the wire is a 5-byte prefix — a compressed flag (0 or 1)
// and a big-endian uint32 length — followed by that many bytes of message.
const prefixLen = 5

// Kinds passed to OnRelocated.
const (
	KindGRPC = "grpc"
	KindHTTP = "http"
)

// OnRelocated is called once per relocated value with its kind (KindGRPC or
// KindHTTP) and the number of bytes moved into the body, so that hosts can
// feed llmesh.relocations and the bytes-moved counter. A nil OnRelocated
// does nothing.
type OnRelocated func(kind string, bytes int)

// relocation is the per-request state the pull and push rewriters share: what
// to append and the rules for the first message.
type relocation struct {
	rule        *GRPCRule
	val         Value
	encoding    string
	onRelocated OnRelocated
}

func newRelocation(plan *GRPCPlan, grpcEncoding string, on OnRelocated) relocation {
	return relocation{rule: plan.Rule, val: plan.Value, encoding: strings.ToLower(strings.TrimSpace(grpcEncoding)), onRelocated: on}
}

// overhead is the size of the appended field: tag, length varint, value.
func (r *relocation) overhead() int {
	return protowire.SizeTag(protowire.Number(r.rule.Field)) + protowire.SizeBytes(r.val.Len())
}

func (r *relocation) limit(what string, size int64) error {
	return &LimitError{Limit: r.rule.limitPath, What: what, Size: size, Max: int64(r.rule.MaxMessage)}
}

// checkPrefix validates the first message's prefix and returns whether the
// message is compressed and its length on the wire. Everything that can be
// refused is refused here, before any of the message is buffered.
func (r *relocation) checkPrefix(h *[prefixLen]byte) (compressed bool, n int, err error) {
	n64 := int64(binary.BigEndian.Uint32(h[1:]))
	switch h[0] {
	case 0:
	case 1:
		compressed = true
		if r.rule.Compressed == Refuse {
			return false, 0, fmt.Errorf("%w by %s.compressed: send the first message uncompressed", ErrCompressed, r.rule.path)
		}
		switch r.encoding {
		case "gzip":
		case "", "identity":
			return false, 0, fmt.Errorf("%w: message flagged compressed but grpc-encoding is %q", ErrEncoding, r.encoding)
		default:
			return false, 0, fmt.Errorf("%w: %q (only gzip messages can be rewritten)", ErrEncoding, r.encoding)
		}
	default:
		return false, 0, fmt.Errorf("%w: gRPC frame flag %d (want 0 or 1)", ErrMalformed, h[0])
	}
	// A compressed message is bounded by the same limit before decompression
	// (gzip grows incompressible data by a few bytes per 32 KiB only) and
	// again after it, in finishCompressed.
	if compressed && (n64 > int64(r.rule.MaxMessage) || r.overhead() > r.rule.MaxMessage) {
		return false, 0, r.limit("compressed first message with the relocated value", n64+int64(r.overhead()))
	}
	if size := n64 + int64(r.overhead()); !compressed && size > int64(r.rule.MaxMessage) {
		return false, 0, r.limit("first message with the relocated value", size)
	}
	return compressed, int(n64), nil
}

// frameBuffer returns the one buffer an uncompressed first message of n
// bytes is read into: the prefix, the message, and room for the field. Its
// contents are unspecified; every byte is written before it is sent.
func (r *relocation) frameBuffer(n int) []byte {
	return getBuf(prefixLen + n + r.overhead())[:prefixLen+n]
}

// finish appends the field to the message in buf[prefixLen:] (which has the
// room frameBuffer reserved) and writes the new prefix.
func (r *relocation) finish(buf []byte) ([]byte, error) {
	buf = protowire.AppendTag(buf, protowire.Number(r.rule.Field), protowire.BytesType)
	buf = protowire.AppendVarint(buf, uint64(r.val.Len()))
	out, err := r.val.appendTo(buf, r.rule.Type == String)
	if err != nil {
		putBuf(buf)
		return nil, err
	}
	buf = out
	buf[0] = 0
	binary.BigEndian.PutUint32(buf[1:prefixLen], uint32(len(buf)-prefixLen))
	r.relocated()
	return buf, nil
}

// finishCompressed decompresses a gzip message, appends the field and
// compresses the result into a new frame. Decompression stops at the
// message limit, so a small compressed message cannot expand unboundedly.
func (r *relocation) finishCompressed(payload []byte) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(payload))
	if err != nil {
		return nil, fmt.Errorf("%w: gzip: %w", ErrMalformed, err)
	}
	budget := int64(r.rule.MaxMessage - r.overhead())
	var msg bytes.Buffer
	msg.Grow(min(4*len(payload), int(budget)) + r.overhead())
	got, err := msg.ReadFrom(io.LimitReader(zr, budget+1))
	if err != nil {
		return nil, fmt.Errorf("%w: gzip: %w", ErrMalformed, err)
	}
	if got > budget {
		return nil, r.limit("decompressed first message with the relocated value", got+int64(r.overhead()))
	}
	m := protowire.AppendTag(msg.Bytes(), protowire.Number(r.rule.Field), protowire.BytesType)
	m = protowire.AppendVarint(m, uint64(r.val.Len()))
	if m, err = r.val.appendTo(m, r.rule.Type == String); err != nil {
		return nil, err
	}
	var out bytes.Buffer
	out.Grow(prefixLen + len(payload) + r.val.Len() + 64)
	out.Write([]byte{1, 0, 0, 0, 0})
	zw := gzip.NewWriter(&out)
	if _, err := zw.Write(m); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	frame := out.Bytes()
	binary.BigEndian.PutUint32(frame[1:prefixLen], uint32(len(frame)-prefixLen))
	r.relocated()
	return frame, nil
}

func (r *relocation) relocated() {
	if r.onRelocated != nil {
		r.onRelocated(KindGRPC, r.val.Len())
	}
}

func truncated(what string, err error) error {
	return fmt.Errorf("%w: request body ended inside %s: %w", ErrMalformed, what, err)
}
