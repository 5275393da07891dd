package exchange

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
)

// Engine priority from the client. vLLM (and the sim) accept a "priority"
// field in the OpenAI request body, and llm.v1.GenerateRequest carries one;
// an engine started with --scheduling-policy priority orders its own
// waiting queue by it. A client that sets it would jump the engine's queue
// however the mesh classified it, so hosts rewrite it before the request
// goes upstream unless the source is trusted for priority (the same
// decision that honours the priority header).

// PriorityMode is what a host does with a request body's engine priority.
type PriorityMode uint8

const (
	// PriorityKeep passes the body as the client sent it (trusted source).
	PriorityKeep PriorityMode = iota
	// PriorityStrip removes every top-level priority, so the engine applies
	// its default (0 in vLLM). Safe with every engine: vLLM's FCFS
	// scheduler rejects a nonzero priority.
	PriorityStrip
	// PrioritySet replaces every top-level priority with one holding
	// EnginePriority.Value, added when the client sent none (for engines
	// that schedule by priority and should see the mesh's class).
	PrioritySet
)

func (m PriorityMode) String() string {
	switch m {
	case PriorityKeep:
		return "keep"
	case PriorityStrip:
		return "strip"
	case PrioritySet:
		return "set"
	}
	return "PriorityMode(" + strconv.Itoa(int(m)) + ")"
}

// EnginePriority is the rewrite applied to one request's body.
type EnginePriority struct {
	Mode PriorityMode
	// Value is written by PrioritySet; ignored otherwise.
	Value int32
}

// llmV1PriorityField is the field number of
// llm.v1.GenerateRequest.priority (api/proto/llm/v1), the request field
// that carries an engine priority on MethodLLMV1. vLLM's VllmEngine
// GenerateRequest has no priority field. The number is repeated here so
// that the filter core does not import gRPC; a test checks it against the
// generated descriptor.
const llmV1PriorityField = protowire.Number(6)

// priorityKey is the OpenAI body field (vLLM's extension).
const priorityKey = "priority"

// Errors of the body priority rewrite; the specific cause is wrapped.
var (
	// ErrPriorityBody: the body cannot be parsed well enough to be sure
	// no priority reaches the engine (invalid JSON, a malformed gRPC frame
	// or protobuf message, an unsupported compression). Hosts refuse the
	// request (HTTP 400, gRPC INVALID_ARGUMENT): passing it on unchecked
	// would let a parser difference carry a priority through.
	ErrPriorityBody = errors.New("request body cannot be checked for a client-set priority")
	// ErrPriorityTooLarge: a compressed gRPC message decompresses beyond
	// the host's limit (HTTP 413, gRPC RESOURCE_EXHAUSTED).
	ErrPriorityTooLarge = errors.New("request message too large to check for a client-set priority")
	// errPriorityEncoding: a JSON body with a Content-Encoding cannot be
	// checked (HTTP 415); it is an ErrPriorityBody.
	errPriorityEncoding = fmt.Errorf("%w: a compressed JSON body cannot be checked", ErrPriorityBody)
)

// BodyPriority decides what happens to the engine priority in the body of
// a request from peer with headers h: PriorityKeep when the classifier
// would honour the request's priority header (a priority header is
// configured and the peer is a trusted source or the request carries the
// trusted marker), PriorityStrip otherwise. A nil Classifier trusts no one.
func (c *Classifier) BodyPriority(peer netip.Addr, h Headers) EnginePriority {
	if c == nil || c.priorityHeader == "" {
		return EnginePriority{Mode: PriorityStrip}
	}
	if h == nil {
		h = noHeaders
	}
	if c.trustedPeer(peer, h) {
		return EnginePriority{Mode: PriorityKeep}
	}
	return EnginePriority{Mode: PriorityStrip}
}

// isJSONBody reports whether a request with this content type is parsed as
// JSON by an OpenAI-compatible server: no content type, application/json,
// or any +json type (FastAPI, which vLLM runs on, reads all of them).
func isJSONBody(contentType string) bool {
	ct, _, _ := strings.Cut(contentType, ";")
	ct = strings.ToLower(strings.TrimSpace(ct))
	return ct == "" || ct == "application/json" || strings.HasSuffix(ct, "+json")
}

// RewriteJSONPriority applies p to the top-level "priority" members of a
// JSON request body. Everything else keeps its bytes: nested "priority"
// keys (inside messages, tools, schemas) stay, as do whitespace and the
// order of the other members. PriorityStrip keeps the body's length: each
// removed member, with one adjacent comma, becomes spaces, so every other
// byte stays at its offset and a host need not touch Content-Length (or
// can rewrite a body it already announced). PrioritySet writes the new
// member first and drops the old ones with their commas. Duplicate keys
// are all removed (parsers disagree on which one wins), and keys are
// compared after unescaping ("priorit\u0079" is "priority" to every JSON
// parser) and without regard to case, as encoding/json matches a struct
// field: a Go engine reads {"PRIORITY":-100} as priority -100, and after
// {"priority":10,"PRIORITY":-100} it keeps the last. Case variants are
// removed like the key itself.
//
// The body must be strict RFC 8259 JSON in UTF-8 (an optional UTF-8 byte
// order mark first); anything else fails with ErrPriorityBody and the
// offset, because an engine with a more lenient parser might read a
// priority the rewrite did not see. An empty or all-white-space body and a
// JSON value that is not an object are returned unchanged. changed reports
// whether out differs from body; when it is false, out is body.
func RewriteJSONPriority(body []byte, p EnginePriority) (out []byte, changed bool, err error) {
	if p.Mode == PriorityKeep {
		return body, false, nil
	}
	if !utf8.Valid(body) {
		return body, false, fmt.Errorf("%w: JSON body is not valid UTF-8", ErrPriorityBody)
	}
	sc := strictJSON{b: body}
	start := 0
	if bytes.HasPrefix(body, []byte("\xef\xbb\xbf")) {
		start = 3
	}
	i := sc.ws(start)
	if i == len(body) {
		return body, false, nil
	}
	if body[i] != '{' {
		end, err := sc.value(i)
		if err != nil {
			return body, false, err
		}
		if err := sc.end(end); err != nil {
			return body, false, err
		}
		return body, false, nil
	}
	open := i
	segs, closeAt, hit, err := sc.members(open)
	if err != nil {
		return body, false, err
	}
	if err := sc.end(closeAt + 1); err != nil {
		return body, false, err
	}
	if p.Mode == PriorityStrip {
		if !hit {
			return body, false, nil
		}
		return blankMembers(body, segs), true, nil
	}
	out = make([]byte, 0, len(body)+24)
	out = append(out, body[:open+1]...)
	first := true
	if p.Mode == PrioritySet {
		out = append(out, `"priority":`...)
		out = strconv.AppendInt(out, int64(p.Value), 10)
		first = false
	}
	for _, s := range segs {
		if s.priority {
			continue
		}
		if !first {
			out = append(out, ',')
		}
		first = false
		out = append(out, body[s.from:s.to]...)
	}
	out = append(out, body[closeAt:]...)
	return out, true, nil
}

// blankMembers returns a copy of body with the priority members, and the
// commas that separated them, turned into spaces: the same length, every
// other byte at its offset. A comma stays when it separates two kept
// members, i.e. when the member after it is kept and one before it was.
func blankMembers(body []byte, segs []segment) []byte {
	out := append([]byte(nil), body...)
	kept := false
	for j, sg := range segs {
		if j > 0 && (sg.priority || !kept) {
			out[sg.from-1] = ' ' // the comma before this member
		}
		if !sg.priority {
			kept = true
			continue
		}
		for i := sg.from; i < sg.to; i++ {
			out[i] = ' '
		}
	}
	return out
}

// RewriteProtoPriority applies p to field in a protobuf message: every
// top-level occurrence, whatever its wire type (a parser files a wrong wire
// type as an unknown field, but removing it costs nothing), is removed;
// PrioritySet then appends the field as a varint. Other fields, unknown
// fields included, keep their bytes and order. A message that does not
// parse as protobuf wire format fails with ErrPriorityBody. changed
// reports whether out differs from msg; when it is false, out is msg.
func RewriteProtoPriority(msg []byte, field protowire.Number, p EnginePriority) (out []byte, changed bool, err error) {
	if p.Mode == PriorityKeep {
		return msg, false, nil
	}
	var spans [][2]int
	for i := 0; i < len(msg); {
		num, typ, n := protowire.ConsumeTag(msg[i:])
		if n < 0 {
			return msg, false, fmt.Errorf("%w: protobuf message at byte %d: %w", ErrPriorityBody, i, protowire.ParseError(n))
		}
		m := protowire.ConsumeFieldValue(num, typ, msg[i+n:])
		if m < 0 {
			return msg, false, fmt.Errorf("%w: protobuf field %d at byte %d: %w", ErrPriorityBody, num, i, protowire.ParseError(m))
		}
		if num == field {
			spans = append(spans, [2]int{i, i + n + m})
		}
		i += n + m
	}
	if len(spans) == 0 && p.Mode == PriorityStrip {
		return msg, false, nil
	}
	out = make([]byte, 0, len(msg)+protowire.SizeTag(field)+protowire.SizeVarint(uint64(int64(p.Value))))
	last := 0
	for _, sp := range spans {
		out = append(out, msg[last:sp[0]]...)
		last = sp[1]
	}
	out = append(out, msg[last:]...)
	if p.Mode == PrioritySet {
		out = protowire.AppendTag(out, field, protowire.VarintType)
		// int32 is encoded as the sign-extended 64-bit varint.
		out = protowire.AppendVarint(out, uint64(int64(p.Value)))
	}
	return out, true, nil
}

// RewriteGRPCPriority applies p to field in every message of a complete
// gRPC request body (5-byte prefixes: compressed flag and big-endian
// length). Compressed messages (flag 1) are gunzipped when grpcEncoding is
// gzip, rewritten, and compressed again only if they changed; other
// encodings fail with ErrPriorityBody. maxMessage bounds every message
// before and after decompression (ErrPriorityTooLarge past it). A body that
// ends inside a frame fails with ErrPriorityBody. changed reports whether
// out differs from body; when it is false, out is body.
func RewriteGRPCPriority(body []byte, grpcEncoding string, maxMessage int, field protowire.Number, p EnginePriority) (out []byte, changed bool, err error) {
	if p.Mode == PriorityKeep {
		return body, false, nil
	}
	enc := strings.ToLower(strings.TrimSpace(grpcEncoding))
	var parts [][]byte // rewritten frames, prefix included; nil until one changes
	for i, k := 0, 0; i < len(body); k++ {
		if len(body)-i < 5 {
			return body, false, fmt.Errorf("%w: gRPC message %d: truncated prefix (%d of 5 bytes)", ErrPriorityBody, k, len(body)-i)
		}
		flag, n := body[i], int(binary.BigEndian.Uint32(body[i+1:i+5]))
		if flag > 1 {
			return body, false, fmt.Errorf("%w: gRPC message %d: compressed flag %d (want 0 or 1)", ErrPriorityBody, k, flag)
		}
		if n > maxMessage {
			return body, false, fmt.Errorf("%w: gRPC message %d of %d bytes exceeds %d", ErrPriorityTooLarge, k, n, maxMessage)
		}
		if len(body)-i-5 < n {
			return body, false, fmt.Errorf("%w: gRPC message %d: %d bytes announced, %d present", ErrPriorityBody, k, n, len(body)-i-5)
		}
		frame, msg := body[i:i+5+n], body[i+5:i+5+n]
		i += 5 + n
		if flag == 1 {
			if enc != "gzip" {
				return body, false, fmt.Errorf("%w: gRPC message %d is compressed with grpc-encoding %q (only gzip can be checked)", ErrPriorityBody, k, grpcEncoding)
			}
			if msg, err = gunzipLimited(msg, maxMessage); err != nil {
				return body, false, fmt.Errorf("gRPC message %d: %w", k, err)
			}
		}
		nmsg, ch, err := RewriteProtoPriority(msg, field, p)
		if err != nil {
			return body, false, fmt.Errorf("gRPC message %d: %w", k, err)
		}
		if !ch {
			if parts != nil {
				parts = append(parts, frame)
			}
			continue
		}
		if flag == 1 {
			if nmsg, err = gzipBytes(nmsg); err != nil {
				return body, false, fmt.Errorf("gRPC message %d: %w", k, err)
			}
		}
		if parts == nil {
			parts = [][]byte{body[:i-5-n]}
		}
		var pre [5]byte
		pre[0] = flag
		binary.BigEndian.PutUint32(pre[1:], uint32(len(nmsg)))
		parts = append(parts, append(pre[:], nmsg...))
	}
	if parts == nil {
		return body, false, nil
	}
	return bytes.Join(parts, nil), true, nil
}

func gunzipLimited(b []byte, limit int) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("%w: gzip: %w", ErrPriorityBody, err)
	}
	defer zr.Close()
	out, err := io.ReadAll(io.LimitReader(zr, int64(limit)+1))
	if err != nil {
		return nil, fmt.Errorf("%w: gzip: %w", ErrPriorityBody, err)
	}
	if len(out) > limit {
		return nil, fmt.Errorf("%w: decompressed beyond %d bytes", ErrPriorityTooLarge, limit)
	}
	return out, nil
}

func gzipBytes(b []byte) ([]byte, error) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
