package relocate

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"unicode/utf8"
	"unsafe"

	"github.com/llmesh/llmesh/internal/jsonscan"
)

// JSONBody is a rewritten JSON request body in three pieces: the original
// bytes before the edit, the inserted or replacing text, and the original
// bytes after it. The document is not re-encoded; Head and Tail alias the
// original body.
type JSONBody struct {
	Head, Insert, Tail []byte
}

// Len is the rewritten body's length (its Content-Length).
func (b *JSONBody) Len() int { return len(b.Head) + len(b.Insert) + len(b.Tail) }

// Reader reads the rewritten body.
func (b *JSONBody) Reader() io.Reader {
	return io.MultiReader(bytes.NewReader(b.Head), bytes.NewReader(b.Insert), bytes.NewReader(b.Tail))
}

// WriteTo writes the three pieces to w.
func (b *JSONBody) WriteTo(w io.Writer) (int64, error) {
	var total int64
	for _, p := range [][]byte{b.Head, b.Insert, b.Tail} {
		n, err := w.Write(p)
		total += int64(n)
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// Bytes returns the rewritten body as one slice (a copy).
func (b *JSONBody) Bytes() []byte {
	out := make([]byte, 0, b.Len())
	return append(append(append(out, b.Head...), b.Insert...), b.Tail...)
}

// RewriteJSON places plan's value into body, a JSON object: it replaces the
// top-level field plan.Field (or adds it), or, for chat, appends
// {"role":"user","content":value} to the top-level "messages" array (or adds
// the array). Only the value is encoded; the rest of the document is kept
// byte for byte. on may be nil.
func RewriteJSON(body []byte, plan *HTTPPlan, on OnRelocated) (*JSONBody, error) {
	rule := plan.Rule
	if len(body) > rule.MaxBody {
		return nil, &LimitError{Limit: rule.limitPath, What: "request body", Size: int64(len(body)), Max: int64(rule.MaxBody)}
	}
	obj, err := scanObject(body, plan.Field)
	if err != nil {
		return nil, err
	}
	// Room for the value, a few escapes and the surrounding syntax, so the
	// value is copied once.
	ins := make([]byte, 0, len(plan.Value)+len(plan.Value)/32+len(plan.Field)+48)
	out := &JSONBody{}
	switch {
	case plan.Chat && obj.valStart >= 0 && body[obj.valStart] == '[':
		end := obj.valEnd - 1 // the closing ']'
		if len(bytes.TrimSpace(body[obj.valStart+1:end])) > 0 {
			ins = append(ins, ',')
		}
		ins, err = appendUserMessage(ins, plan.Value)
		out.Head, out.Tail = body[:end], body[end:]
	case plan.Chat && obj.valStart >= 0 && body[obj.valStart] != 'n': // not null
		return nil, fmt.Errorf("%w: %q is not an array", ErrMalformed, plan.Field)
	case plan.Chat && obj.valStart >= 0: // "messages": null
		ins = append(ins, '[')
		ins, err = appendUserMessage(ins, plan.Value)
		ins = append(ins, ']')
		out.Head, out.Tail = body[:obj.valStart], body[obj.valEnd:]
	case obj.valStart >= 0:
		ins, err = appendJSONString(ins, plan.Value)
		out.Head, out.Tail = body[:obj.valStart], body[obj.valEnd:]
	default:
		if obj.members > 0 {
			ins = append(ins, ',')
		}
		ins = append(append(append(ins, '"'), plan.Field...), `":`...)
		if plan.Chat {
			ins = append(ins, '[')
			ins, err = appendUserMessage(ins, plan.Value)
			ins = append(ins, ']')
		} else {
			ins, err = appendJSONString(ins, plan.Value)
		}
		out.Head, out.Tail = body[:obj.closing], body[obj.closing:]
	}
	if err != nil {
		return nil, err
	}
	out.Insert = ins
	if n := out.Len(); n > rule.MaxBody {
		return nil, &LimitError{Limit: rule.limitPath, What: "request body with the relocated value", Size: int64(n), Max: int64(rule.MaxBody)}
	}
	if on != nil {
		on(KindHTTP, len(plan.Value))
	}
	return out, nil
}

// object is what scanObject learned about a top-level JSON object.
type object struct {
	members          int
	closing          int // index of the closing '}'
	valStart, valEnd int // span of the wanted member's value; -1 when absent
}

var (
	errNotJSON   = fmt.Errorf("%w: request body is not valid JSON", ErrMalformed)
	errNotObject = fmt.Errorf("%w: request body is not a JSON object", ErrMalformed)
)

// scanObject validates b, accepting exactly what json.Valid accepts, and
// walks the top-level members of the object it must be, finding the last
// member named key (JSON parsers keep the last duplicate). One pass does
// both: the body is read once.
func scanObject(b []byte, key string) (object, error) {
	o := object{valStart: -1, valEnd: -1}
	i := jsonscan.Space(b, 0)
	if i >= len(b) || b[i] != '{' {
		if jsonscan.Valid(b) {
			return o, errNotObject
		}
		return o, errNotJSON
	}
	i, empty := jsonscan.Enter(b, i)
	for more := !empty; more; {
		name, escaped, vs, ok := jsonscan.Member(b, i)
		if !ok {
			return o, errNotJSON
		}
		// The object itself is one of json.Valid's levels.
		end, ok := jsonscan.Value(b, vs, jsonscan.MaxDepth-1)
		if !ok {
			return o, errNotJSON
		}
		o.members++
		if jsonscan.KeyEquals(name, escaped, key) {
			o.valStart, o.valEnd = vs, end
		}
		if i, more, ok = jsonscan.Next(b, end, '}'); !ok {
			return o, errNotJSON
		}
	}
	o.closing = i
	if jsonscan.Space(b, o.closing+1) != len(b) {
		return o, errNotJSON
	}
	return o, nil
}

// appendUserMessage appends {"role":"user","content":value}.
func appendUserMessage(dst []byte, value string) ([]byte, error) {
	dst = append(dst, `{"role":"user","content":`...)
	dst, err := appendJSONString(dst, value)
	if err != nil {
		return nil, err
	}
	return append(dst, '}'), nil
}

const hexDigits = "0123456789abcdef"

// jsonSafe marks the ASCII bytes a JSON string carries unescaped.
var jsonSafe = func() (t [utf8.RuneSelf]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

const (
	lsb = 0x0101010101010101
	msb = 0x8080808080808080
)

// needsAttention reports whether any of the 8 bytes in x is a control
// character, '"', '\\' or not ASCII (the classic "has byte less than" and
// "has zero byte" bit tricks, exact as booleans).
func needsAttention(x uint64) bool {
	ctl := (x - lsb*0x20) &^ x
	q := x ^ (lsb * '"')
	q = (q - lsb) &^ q
	bs := x ^ (lsb * '\\')
	bs = (bs - lsb) &^ bs
	return (ctl|q|bs|x)&msb != 0
}

// appendJSONString appends s as a JSON string, copying runs that need no
// escaping in one go. Invalid UTF-8 is refused rather than silently
// replaced, so the engine sees exactly the prompt the client sent.
func appendJSONString(dst []byte, s string) ([]byte, error) {
	dst = append(dst, '"')
	b := unsafe.Slice(unsafe.StringData(s), len(s)) // read only
	run := 0
	for i := 0; i < len(s); {
		// Prompts are mostly plain text: skip 8 such bytes at a time.
		for i+8 <= len(b) && !needsAttention(binary.LittleEndian.Uint64(b[i:i+8])) {
			i += 8
		}
		if i == len(s) {
			break
		}
		c := s[i]
		if c < utf8.RuneSelf && jsonSafe[c] {
			i++
			continue
		}
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				return nil, fmt.Errorf("%w: value is not valid UTF-8 at byte %d", ErrInvalidValue, i)
			}
			i += size
			continue
		}
		dst = append(dst, s[run:i]...)
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		}
		i++
		run = i
	}
	dst = append(dst, s[run:]...)
	return append(dst, '"'), nil
}
