package filter

import (
	"encoding/binary"
	"math/bits"
)

// A validating JSON skipper for ParseOpenAIRequest: it accepts only what
// encoding/json's own scanner accepts (RFC 8259 grammar; like encoding/json
// it does not check UTF-8), so that a body the fast path decodes is one
// json.Unmarshal would decode too. It builds nothing and never recurses.

// jsMaxDepth bounds the nesting a skipped value may have. encoding/json
// allows 10000 levels; deeper values (or anything this close to its limit)
// are left to encoding/json to accept or refuse.
const jsMaxDepth = 1000

// Word-at-a-time constants: jsOnes has 0x01 in every byte, jsHighs 0x80.
const (
	jsOnes  = 0x0101010101010101
	jsHighs = 0x8080808080808080
)

// jsSpace returns the index of the first byte at or after i that is not
// JSON white space.
func jsSpace(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// jsPlain marks the bytes a JSON string holds without further checks:
// all but '"', '\\' and control characters.
var jsPlain = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// jsString validates the string whose opening quote is b[i] and returns
// the index after its closing quote and whether it holds escapes. Prompts
// are most of a request's bytes, so plain runs are skipped eight bytes at
// a time.
func jsString(b []byte, i int) (end int, escaped, ok bool) {
	i++
	for {
		for i+8 <= len(b) {
			w := binary.LittleEndian.Uint64(b[i:])
			q := w ^ ('"' * jsOnes)
			s := w ^ ('\\' * jsOnes)
			// A byte's high bit is set here if it is below 0x20, a quote
			// or a backslash; false positives only above a true one, so
			// the lowest set bit marks the first byte that needs a look.
			m := ((w - 0x20*jsOnes) | (q - jsOnes) | (s - jsOnes)) &^ w & jsHighs
			if m != 0 {
				i += bits.TrailingZeros64(m) >> 3
				break
			}
			i += 8
		}
		for i < len(b) && jsPlain[b[i]] {
			i++
		}
		if i >= len(b) {
			return 0, false, false
		}
		switch c := b[i]; {
		case c == '"':
			return i + 1, escaped, true
		case c == '\\':
			escaped = true
			if i+1 >= len(b) {
				return 0, false, false
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) || !jsHex4(b[i+2:i+6]) {
					return 0, false, false
				}
				i += 6
			default:
				return 0, false, false
			}
		default: // a control character
			return 0, false, false
		}
	}
}

func jsHex4(b []byte) bool {
	for _, c := range b {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// jsNumber validates -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? at
// b[i] and returns the index after it.
func jsNumber(b []byte, i int) (int, bool) {
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && '1' <= b[i] && b[i] <= '9':
		i = jsDigits(b, i+1)
	default:
		return 0, false
	}
	if i < len(b) && b[i] == '.' {
		j := jsDigits(b, i+1)
		if j == i+1 {
			return 0, false
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := jsDigits(b, i)
		if j == i {
			return 0, false
		}
		i = j
	}
	return i, true
}

func jsDigits(b []byte, i int) int {
	for i < len(b) && '0' <= b[i] && b[i] <= '9' {
		i++
	}
	return i
}

// jsLiteral checks that lit (true, false or null) is at b[i] and returns
// the index after it.
func jsLiteral(b []byte, i int, lit string) (int, bool) {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return 0, false
	}
	return i + len(lit), true
}

// jsScalar validates a string, number or literal at b[i].
func jsScalar(b []byte, i int) (int, bool) {
	if i >= len(b) {
		return 0, false
	}
	switch c := b[i]; {
	case c == '"':
		end, _, ok := jsString(b, i)
		return end, ok
	case c == '-' || '0' <= c && c <= '9':
		return jsNumber(b, i)
	case c == 't':
		return jsLiteral(b, i, "true")
	case c == 'f':
		return jsLiteral(b, i, "false")
	case c == 'n':
		return jsLiteral(b, i, "null")
	}
	return 0, false
}

// jsKey validates `"name" :` at b[i] (after white space) and returns the
// index after the colon.
func jsKey(b []byte, i int) (int, bool) {
	i = jsSpace(b, i)
	if i >= len(b) || b[i] != '"' {
		return 0, false
	}
	end, _, ok := jsString(b, i)
	if !ok {
		return 0, false
	}
	i = jsSpace(b, end)
	if i >= len(b) || b[i] != ':' {
		return 0, false
	}
	return i + 1, true
}

// jsValue validates one JSON value starting at b[i] (white space already
// skipped) and returns the index after it.
func jsValue(b []byte, i int) (int, bool) {
	if i < len(b) && b[i] != '{' && b[i] != '[' {
		return jsScalar(b, i)
	}
	// One bit per open container, set for objects: no recursion, and no
	// allocation for the first 256 levels.
	var small [4]uint64
	stack := small[:]
	depth := 0
	var ok bool
	for {
		// A value starts at i.
		i = jsSpace(b, i)
		if i >= len(b) {
			return 0, false
		}
		if c := b[i]; c == '{' || c == '[' {
			obj := c == '{'
			i = jsSpace(b, i+1)
			if i < len(b) && (obj && b[i] == '}' || !obj && b[i] == ']') {
				i++
			} else {
				if depth == jsMaxDepth {
					return 0, false
				}
				if depth>>6 == len(stack) {
					stack = append(stack, 0)
				}
				if obj {
					stack[depth>>6] |= 1 << (depth & 63)
					if i, ok = jsKey(b, i); !ok {
						return 0, false
					}
				} else {
					stack[depth>>6] &^= 1 << (depth & 63)
				}
				depth++
				continue
			}
		} else if i, ok = jsScalar(b, i); !ok {
			return 0, false
		}
		// A value ended at i: close containers until one goes on.
		for {
			if depth == 0 {
				return i, true
			}
			i = jsSpace(b, i)
			if i >= len(b) {
				return 0, false
			}
			obj := stack[(depth-1)>>6]&(1<<((depth-1)&63)) != 0
			if b[i] == ',' {
				if obj {
					if i, ok = jsKey(b, i+1); !ok {
						return 0, false
					}
				} else {
					i++
				}
				break
			}
			if obj && b[i] == '}' || !obj && b[i] == ']' {
				depth--
				i++
				continue
			}
			return 0, false
		}
	}
}
