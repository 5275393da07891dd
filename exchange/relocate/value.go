package relocate

import (
	"encoding/base64"
	"fmt"
	"strings"
	"unicode/utf8"
	"unsafe"
)

// Value is a header value chosen for relocation, kept in its wire form
// until it is written straight into the rewritten message, so that the
// prompt is copied (or base64-decoded) exactly once.
type Value struct {
	raw string
	// enc is nil for plain text; for "-bin" keys it is the base64 variant
	// the sender used (gRPC sends unpadded and accepts both).
	enc *base64.Encoding
	n   int
}

// PlainValue is a Value carrying s verbatim.
func PlainValue(s string) Value { return Value{raw: s, n: len(s)} }

// Len is the decoded length in bytes.
func (v Value) Len() int { return v.n }

// parseValue builds the Value of key from the header's values. The decoded
// length is computed without decoding; bad base64 characters surface when
// the value is written (appendTo).
func parseValue(key string, vs []string) (Value, error) {
	if len(vs) != 1 {
		return Value{}, fmt.Errorf("%w: metadata %s appears %d times; send the prompt once", ErrInvalidValue, key, len(vs))
	}
	return ParseValue(key, vs[0])
}

// ParseValue interprets raw as the value of metadata key: verbatim for text
// keys, base64 (standard or raw, as gRPC accepts) for keys ending in "-bin".
func ParseValue(key, raw string) (Value, error) {
	if !strings.HasSuffix(strings.ToLower(key), "-bin") {
		return PlainValue(raw), nil
	}
	// gRPC's rule (internal/transport decodeBinHeader): a length that is a
	// multiple of 4 is padded (or needs no padding), anything else is raw.
	if len(raw)%4 == 0 {
		pad := 0
		if strings.HasSuffix(raw, "==") {
			pad = 2
		} else if strings.HasSuffix(raw, "=") {
			pad = 1
		}
		return Value{raw: raw, enc: base64.StdEncoding, n: len(raw)/4*3 - pad}, nil
	}
	if len(raw)%4 == 1 {
		return Value{}, fmt.Errorf("%w: metadata %s: %d base64 characters cannot encode whole bytes", ErrInvalidValue, key, len(raw))
	}
	return Value{raw: raw, enc: base64.RawStdEncoding, n: base64.RawStdEncoding.DecodedLen(len(raw))}, nil
}

// appendTo appends the decoded value to dst, growing it at most once. With
// checkUTF8 the decoded bytes must be valid UTF-8 (proto3 string fields).
func (v Value) appendTo(dst []byte, checkUTF8 bool) ([]byte, error) {
	start := len(dst)
	if v.enc == nil {
		dst = append(dst, v.raw...)
	} else {
		dst = grow(dst, v.n)
		// The decoder only reads src, so viewing the string's bytes in place
		// is safe and saves copying the encoded prompt.
		src := unsafe.Slice(unsafe.StringData(v.raw), len(v.raw))
		n, err := v.enc.Decode(dst[start:start+v.n], src)
		if err != nil {
			return dst[:start], fmt.Errorf("%w: base64: %w", ErrInvalidValue, err)
		}
		if n != v.n {
			// base64 skips CR and LF, which a header cannot carry anyway.
			return dst[:start], fmt.Errorf("%w: base64 decoded to %d bytes, want %d", ErrInvalidValue, n, v.n)
		}
		dst = dst[:start+n]
	}
	if checkUTF8 && !utf8.Valid(dst[start:]) {
		return dst[:start], fmt.Errorf("%w: value is not valid UTF-8, which a string field requires (use a bytes field or a UTF-8 prompt)", ErrInvalidValue)
	}
	return dst, nil
}

// grow returns dst with room for n more bytes, its length extended by n.
func grow(dst []byte, n int) []byte {
	if cap(dst)-len(dst) < n {
		nd := make([]byte, len(dst), len(dst)+n)
		copy(nd, dst)
		dst = nd
	}
	return dst[:len(dst)+n]
}
