package relocate

import (
	"errors"
	"io"
)

// GRPCReader rewrites a gRPC request body read from src: the first message
// gets the relocated field appended and a new length prefix; every byte after
// it is read straight from src into the caller's buffer. It buffers only the
// first message (bounded by the rule's MaxMessage).
//
// A GRPCReader belongs to one request and is read by one goroutine; Close
// may be called concurrently with Read.
type GRPCReader struct {
	src   io.Reader
	rel   relocation
	frame []byte // the rest of the rewritten first message, served before src
	owned []byte // all of it, recycled once served
	done  bool   // Prepare ran
	err   error  // Prepare's result, sticky
}

// NewGRPCReader returns a reader applying plan to the body src of a call
// whose grpc-encoding header is grpcEncoding ("" when absent). on may be
// nil.
func NewGRPCReader(src io.Reader, plan *GRPCPlan, grpcEncoding string, on OnRelocated) *GRPCReader {
	return &GRPCReader{src: src, rel: newRelocation(plan, grpcEncoding, on)}
}

// Prepare reads and rewrites the first message now, so that a host can
// answer a limit or format error with a proper status before it forwards
// anything. Read calls it when the host did not. It blocks until the client
// has sent its first message; every LLM API sends it with the call.
func (r *GRPCReader) Prepare() error {
	if r.done {
		return r.err
	}
	r.done = true
	r.frame, r.err = r.readFirst()
	r.owned = r.frame
	return r.err
}

func (r *GRPCReader) readFirst() ([]byte, error) {
	var h [prefixLen]byte
	if _, err := io.ReadFull(r.src, h[:]); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, truncated("the request: no message carries the relocated value", err)
		}
		return nil, truncated("the first message's prefix", err)
	}
	compressed, n, err := r.rel.checkPrefix(&h)
	if err != nil {
		return nil, err
	}
	if compressed {
		payload := getBuf(n)
		defer putBuf(payload)
		if _, err := io.ReadFull(r.src, payload); err != nil {
			return nil, truncated("the first message", eofUnexpected(err))
		}
		return r.rel.finishCompressed(payload)
	}
	buf := r.rel.frameBuffer(n)
	if _, err := io.ReadFull(r.src, buf[prefixLen:]); err != nil {
		putBuf(buf)
		return nil, truncated("the first message", eofUnexpected(err))
	}
	return r.rel.finish(buf)
}

func eofUnexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// Read serves the rewritten first message, then reads through to src.
func (r *GRPCReader) Read(p []byte) (int, error) {
	if err := r.Prepare(); err != nil {
		return 0, err
	}
	if len(r.frame) > 0 {
		n := copy(p, r.frame)
		r.frame = r.frame[n:]
		if len(r.frame) == 0 {
			r.release()
		}
		return n, nil
	}
	return r.src.Read(p)
}

// WriteTo hands the rewritten first message to w in one call and then copies
// the rest of src, which spares io.Copy a pass through a scratch buffer.
func (r *GRPCReader) WriteTo(w io.Writer) (int64, error) {
	if err := r.Prepare(); err != nil {
		return 0, err
	}
	var total int64
	if len(r.frame) > 0 {
		n, err := w.Write(r.frame)
		total += int64(n)
		r.frame = r.frame[n:]
		if err != nil {
			return total, err
		}
		r.release()
	}
	n, err := io.Copy(w, r.src)
	return total + n, err
}

// release recycles the first message's buffer once it has been served.
func (r *GRPCReader) release() {
	putBuf(r.owned)
	r.frame, r.owned = nil, nil
}

// Close closes src when it is an io.Closer. It leaves the first message's
// buffer alone (an unserved one is left to the garbage collector): HTTP
// transports may call Close while another goroutine is inside Read.
func (r *GRPCReader) Close() error {
	if c, ok := r.src.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// GRPCRewriter is the push form of GRPCReader for hosts that receive the body
// as chunks (the Envoy filter's DecodeData). Frames may be split across
// chunks and a chunk may hold several frames; only the first message is
// buffered, everything after it is handed on as sub-slices of the chunks it
// arrived in, without copying.
//
// A GRPCRewriter belongs to one request and is used by one goroutine.
type GRPCRewriter struct {
	rel        relocation
	hdr        [prefixLen]byte
	nhdr       int
	compressed bool
	buf        []byte // first message being assembled
	fill       int    // bytes of the message in buf so far
	inMessage  bool
	passing    bool  // the first message went out; everything else passes
	err        error // sticky
}

// NewGRPCRewriter returns a push rewriter applying plan to a call whose
// grpc-encoding header is grpcEncoding ("" when absent). on may be nil.
func NewGRPCRewriter(plan *GRPCPlan, grpcEncoding string, on OnRelocated) *GRPCRewriter {
	return &GRPCRewriter{rel: newRelocation(plan, grpcEncoding, on)}
}

// Write consumes chunk and calls emit with the output, in order. The slices
// given to emit alias chunk or the rewriter's own buffer and are valid only
// during the call. Once Write returned an error every later call returns
// it too.
func (w *GRPCRewriter) Write(chunk []byte, emit func([]byte) error) error {
	if w.err != nil {
		return w.err
	}
	if w.passing {
		if len(chunk) == 0 {
			return nil
		}
		return emit(chunk)
	}
	for len(chunk) > 0 && !w.passing {
		if !w.inMessage {
			k := copy(w.hdr[w.nhdr:], chunk)
			w.nhdr += k
			chunk = chunk[k:]
			if w.nhdr < prefixLen {
				return nil
			}
			compressed, n, err := w.rel.checkPrefix(&w.hdr)
			if err != nil {
				w.err = err
				return err
			}
			w.compressed, w.inMessage = compressed, true
			if compressed {
				w.buf, w.fill = getBuf(n), 0
			} else {
				w.buf, w.fill = w.rel.frameBuffer(n), prefixLen
			}
		}
		k := copy(w.buf[w.fill:], chunk)
		w.fill += k
		chunk = chunk[k:]
		if w.fill < len(w.buf) {
			return nil
		}
		var frame []byte
		var err error
		if w.compressed {
			frame, err = w.rel.finishCompressed(w.buf)
			putBuf(w.buf)
		} else {
			frame, err = w.rel.finish(w.buf) // recycles w.buf on error
		}
		w.buf = nil
		if err != nil {
			w.err = err
			return err
		}
		w.passing = true
		err = emit(frame)
		putBuf(frame) // emit's slices are valid only during the call
		if err != nil {
			w.err = err
			return err
		}
	}
	if len(chunk) > 0 {
		return emit(chunk)
	}
	return nil
}

// Close reports whether the stream ended properly: an error when it ended
// before the first message was complete.
func (w *GRPCRewriter) Close() error {
	if w.err != nil {
		return w.err
	}
	if w.passing {
		return nil
	}
	switch {
	case w.nhdr == 0:
		w.err = truncated("the request: no message carries the relocated value", io.EOF)
	case !w.inMessage:
		w.err = truncated("the first message's prefix", io.ErrUnexpectedEOF)
	default:
		w.err = truncated("the first message", io.ErrUnexpectedEOF)
	}
	putBuf(w.buf)
	w.buf = nil
	return w.err
}

// Relocated reports whether the first message has been rewritten and sent.
func (w *GRPCRewriter) Relocated() bool { return w.passing }
