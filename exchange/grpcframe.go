package exchange

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strings"
	"time"
)

// grpcState is the incremental parser of gRPC's length-prefixed messages:
// a 1-byte compressed flag, a 4-byte big-endian length, then the message.
// A message that lies wholly inside one chunk is decoded in place; only a
// message split across chunks is copied into buf.
type grpcState struct {
	hdr        [5]byte
	hdrN       int
	inBody     bool
	compressed bool
	// web: the response is binary gRPC-Web, whose trailers arrive as a
	// last frame with flag 0x80 (set from the content type).
	web bool
	// trailer: the current frame is a gRPC-Web trailer frame.
	trailer   bool
	remaining int
	buf       []byte
}

func (g *grpcState) reset() {
	g.hdrN = 0
	g.inBody = false
	g.compressed = false
	g.web = false
	g.trailer = false
	g.remaining = 0
	g.buf = g.buf[:0]
}

func (o *Observer) observeGRPC(t time.Time, p []byte) error {
	g := &o.grpc
	var firstErr error
	for len(p) > 0 {
		if !g.inBody {
			n := copy(g.hdr[g.hdrN:], p)
			g.hdrN += n
			p = p[n:]
			if g.hdrN < len(g.hdr) {
				return firstErr
			}
			g.hdrN = 0
			flag := g.hdr[0]
			size := binary.BigEndian.Uint32(g.hdr[1:])
			trailer := g.web && flag&0x80 != 0
			if trailer {
				flag &^= 0x80
			}
			if flag > 1 {
				return o.fail(ErrorMalformed, fmt.Errorf("%w: gRPC frame flag %#x is neither 0 nor 1", ErrMalformed, g.hdr[0]))
			}
			if uint64(size) > uint64(o.opts.MaxFrameBytes) {
				return o.fail(ErrorFrameTooLarge, fmt.Errorf("%w: declared length %d exceeds max_frame_bytes %d",
					ErrFrameTooLarge, size, o.opts.MaxFrameBytes))
			}
			g.inBody = true
			g.compressed = flag == 1
			g.trailer = trailer
			g.remaining = int(size)
			g.buf = g.buf[:0]
		}
		if g.compressed {
			n := min(g.remaining, len(p))
			g.remaining -= n
			p = p[n:]
			if g.remaining == 0 {
				g.inBody = false
				if g.trailer {
					continue // compressed trailers cannot be read; nothing to count
				}
				o.obs.Chunks++
				o.obs.CompressedFrames++
				o.tokenChunk(t, 1)
			}
			continue
		}
		var msg []byte
		if len(g.buf) == 0 && len(p) >= g.remaining {
			msg = p[:g.remaining]
			p = p[g.remaining:]
			g.remaining = 0
		} else {
			n := min(g.remaining, len(p))
			g.buf = append(g.buf, p[:n]...)
			g.remaining -= n
			p = p[n:]
			if g.remaining > 0 {
				return firstErr
			}
			msg = g.buf
		}
		g.inBody = false
		if g.trailer {
			o.readTrailers(webTrailers(msg))
		} else if err := o.grpcMessage(t, msg); err != nil && firstErr == nil {
			firstErr = err
		}
		g.buf = g.buf[:0]
	}
	return firstErr
}

// grpcMessage accounts one complete, uncompressed message.
func (o *Observer) grpcMessage(t time.Time, msg []byte) error {
	o.obs.Chunks++
	c := &o.chunk
	c.reset()
	if err := o.extractor.Extract(msg, c); err != nil {
		return o.malformed("gRPC message %d: %v", o.obs.Chunks, err)
	}
	if len(c.FinishReason) > 0 && string(c.FinishReason) != o.obs.FinishReason {
		o.obs.FinishReason = string(c.FinishReason)
	}
	if c.Usage {
		o.obs.UsageReported = true
		o.obs.OutputTokens = c.CompletionTokens
		if c.PromptTokens > 0 {
			o.obs.PromptTokens = c.PromptTokens
		}
	}
	if c.Tokens > 0 && (!c.Cumulative || o.obs.TokenChunks == 0) {
		o.tokenChunk(t, c.Tokens)
		if o.opts.KeepOutput {
			o.tokenIDs = append(o.tokenIDs, c.TokenIDs...)
			o.text = append(o.text, c.Text...)
		}
	}
	return nil
}

// webTrailers reads a gRPC-Web trailer frame's payload: HTTP/1-style
// header lines ("grpc-status: 0\r\n"), names case-insensitive. Lines
// without a colon are skipped; a later value of a name replaces an
// earlier one.
func webTrailers(b []byte) MapHeaders {
	h := MapHeaders{}
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		k, v, ok := bytes.Cut(line, []byte{':'})
		if !ok {
			continue
		}
		h[strings.ToLower(string(bytes.TrimSpace(k)))] = string(bytes.TrimSpace(v))
	}
	return h
}
