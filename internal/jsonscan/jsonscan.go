// Package jsonscan is the one place JSON is scanned by hand, for the hot
// paths where a decode, or json.Valid's function call per byte, would cost
// more than the work around it. It builds nothing and never recurses. Two
// modes:
//
//   - Strict (Space, String, Number, Literal, Scalar, Key, Value, Valid,
//     the member walk Enter, Member and Next, KeyEquals, KeyEqualFold,
//     Check, CheckString): exactly encoding/json's grammar (RFC 8259; like
//     encoding/json it does not check UTF-8), held to json.Valid by
//     FuzzValid. Request sizing (exchange.ParseOpenAIRequest), the
//     engine-priority guard (exchange.RewriteJSONPriority), relocation's
//     JSON edit (relocate.RewriteJSON) and the benchmark client's SSE fast
//     path use it. Check and CheckString also say where and why input is
//     refused, walking it a second time only then.
//   - Lenient (Lenient, ClosingQuote, AppendUnescaped): the observer's
//     reading of response chunks, which counts what an engine already sent
//     rather than judging it, so it skips values checking only nesting and
//     string ends, and decodes any string contents. Each type says what
//     it tolerates beyond the grammar.
package jsonscan

import (
	"encoding/binary"
	"encoding/json"
	"math/bits"
	"strings"
)

// MaxDepth is encoding/json's nesting limit: json.Valid refuses a value
// with more levels of containers, empty ones included.
const MaxDepth = 10000

// Word-at-a-time constants: ones has 0x01 in every byte, highs 0x80.
const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// Space returns the index of the first byte at or after i that is not
// JSON white space.
func Space(b []byte, i int) int {
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

// plain marks the bytes a JSON string holds without further checks:
// all but '"', '\\' and control characters.
var plain = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// String validates the string whose opening quote is b[i] and returns
// the index after its closing quote and whether it holds escapes. Prompts
// are most of a request's bytes, so plain runs are skipped eight bytes at
// a time.
func String(b []byte, i int) (end int, escaped, ok bool) {
	i++
	for {
		for i+8 <= len(b) {
			w := binary.LittleEndian.Uint64(b[i:])
			q := w ^ ('"' * ones)
			s := w ^ ('\\' * ones)
			// A byte's high bit is set here if it is below 0x20, a quote
			// or a backslash; false positives only above a true one, so
			// the lowest set bit marks the first byte that needs a look.
			m := ((w - 0x20*ones) | (q - ones) | (s - ones)) &^ w & highs
			if m != 0 {
				i += bits.TrailingZeros64(m) >> 3
				break
			}
			i += 8
		}
		for i < len(b) && plain[b[i]] {
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
				if i+6 > len(b) || !hex4(b[i+2:i+6]) {
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

func hex4(b []byte) bool {
	for _, c := range b {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// Number validates -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? at
// b[i] and returns the index after it.
func Number(b []byte, i int) (int, bool) {
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && '1' <= b[i] && b[i] <= '9':
		i = digits(b, i+1)
	default:
		return 0, false
	}
	if i < len(b) && b[i] == '.' {
		j := digits(b, i+1)
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
		j := digits(b, i)
		if j == i {
			return 0, false
		}
		i = j
	}
	return i, true
}

func digits(b []byte, i int) int {
	for i < len(b) && '0' <= b[i] && b[i] <= '9' {
		i++
	}
	return i
}

// Literal checks that lit (true, false or null) is at b[i] and returns
// the index after it.
func Literal(b []byte, i int, lit string) (int, bool) {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return 0, false
	}
	return i + len(lit), true
}

// Scalar validates a string, number or literal at b[i].
func Scalar(b []byte, i int) (int, bool) {
	if i >= len(b) {
		return 0, false
	}
	switch c := b[i]; {
	case c == '"':
		end, _, ok := String(b, i)
		return end, ok
	case c == '-' || '0' <= c && c <= '9':
		return Number(b, i)
	case c == 't':
		return Literal(b, i, "true")
	case c == 'f':
		return Literal(b, i, "false")
	case c == 'n':
		return Literal(b, i, "null")
	}
	return 0, false
}

// Key validates `"name" :` at b[i] (after white space) and returns the
// index after the colon.
func Key(b []byte, i int) (int, bool) {
	i = Space(b, i)
	if i >= len(b) || b[i] != '"' {
		return 0, false
	}
	end, _, ok := String(b, i)
	if !ok {
		return 0, false
	}
	i = Space(b, end)
	if i >= len(b) || b[i] != ':' {
		return 0, false
	}
	return i + 1, true
}

// Value validates one JSON value starting at b[i] (white space already
// skipped) nested at most maxDepth containers deep, and returns the index
// after it. With MaxDepth it accepts what json.Valid accepts; a caller that
// leaves deep values to encoding/json passes less.
func Value(b []byte, i, maxDepth int) (int, bool) {
	if i < len(b) && b[i] != '{' && b[i] != '[' {
		return Scalar(b, i)
	}
	// One bit per open container, set for objects: no recursion, and no
	// allocation for the first 256 levels.
	var small [4]uint64
	stack := small[:]
	depth := 0
	var ok bool
	for {
		// A value starts at i.
		i = Space(b, i)
		if i >= len(b) {
			return 0, false
		}
		if c := b[i]; c == '{' || c == '[' {
			if depth == maxDepth { // an empty container counts too
				return 0, false
			}
			obj := c == '{'
			i = Space(b, i+1)
			if i < len(b) && (obj && b[i] == '}' || !obj && b[i] == ']') {
				i++
			} else {
				if depth>>6 == len(stack) {
					stack = append(stack, 0)
				}
				if obj {
					stack[depth>>6] |= 1 << (depth & 63)
					if i, ok = Key(b, i); !ok {
						return 0, false
					}
				} else {
					stack[depth>>6] &^= 1 << (depth & 63)
				}
				depth++
				continue
			}
		} else if i, ok = Scalar(b, i); !ok {
			return 0, false
		}
		// A value ended at i: close containers until one goes on.
		for {
			if depth == 0 {
				return i, true
			}
			i = Space(b, i)
			if i >= len(b) {
				return 0, false
			}
			obj := stack[(depth-1)>>6]&(1<<((depth-1)&63)) != 0
			if b[i] == ',' {
				if obj {
					if i, ok = Key(b, i+1); !ok {
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

// Valid reports whether b is one JSON value with optional white space
// around it, exactly as json.Valid does.
func Valid(b []byte) bool {
	end, ok := Value(b, Space(b, 0), MaxDepth)
	return ok && Space(b, end) == len(b)
}

// KeyEquals reports whether quoted, a member name as String validated it
// (quotes included, escaped as String reported), names name once
// unescaped, as every JSON parser reads it ("priorit\u0079" is
// "priority"). Only an escaped name is decoded, so raw bytes that are not
// UTF-8 compare as themselves (encoding/json reads each as U+FFFD): the
// same answer for any name that is UTF-8 without U+FFFD.
func KeyEquals(quoted []byte, escaped bool, name string) bool {
	if !escaped {
		return string(quoted[1:len(quoted)-1]) == name
	}
	var k string
	return json.Unmarshal(quoted, &k) == nil && k == name
}

// KeyEqualFold is KeyEquals under encoding/json's field matching: the
// unescaped name equals name under simple Unicode case folding, so
// "PRIORITY" and "Priority" both fill a struct field tagged "priority"
// (and a Go engine that decodes into such a struct reads the last of
// them). Guards that must catch every member a Go decoder would read use
// this; raw bytes that are not UTF-8 compare as U+FFFD, as encoding/json
// reads them.
func KeyEqualFold(quoted []byte, escaped bool, name string) bool {
	if !escaped {
		return strings.EqualFold(string(quoted[1:len(quoted)-1]), name)
	}
	var k string
	return json.Unmarshal(quoted, &k) == nil && strings.EqualFold(k, name)
}
