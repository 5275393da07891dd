package exchange

import (
	"bytes"

	"github.com/llmesh/llmesh/internal/jsonscan"
)

// jsonScanner walks just enough JSON to pull out the fields the observer
// needs, without allocating and without building values. It is lenient
// about what it skips (it checks nesting and string termination, not every
// literal) and strict enough to notice truncated or garbled input.
type jsonScanner struct {
	b   []byte
	i   int
	bad bool
}

func (s *jsonScanner) ws() { s.i = jsonscan.Space(s.b, s.i) }

// peek returns the next non-space byte, or 0 at the end.
func (s *jsonScanner) peek() byte {
	s.ws()
	if s.i >= len(s.b) {
		return 0
	}
	return s.b[s.i]
}

// open consumes c ('{' or '[') and reports whether it was there. A null is
// consumed and reported as absent; any other value is skipped.
func (s *jsonScanner) open(c byte) bool {
	switch s.peek() {
	case c:
		s.i++
		return true
	case 0:
		s.bad = true
		return false
	}
	s.skip()
	return false
}

// key returns the next member name of an object opened with open('{') and
// leaves the scanner at its value; ok is false at the closing brace.
func (s *jsonScanner) key() (k []byte, ok bool) {
	if s.bad {
		return nil, false
	}
	c := s.peek()
	if c == ',' {
		s.i++
		c = s.peek()
	}
	if c == '}' {
		s.i++
		return nil, false
	}
	if c != '"' {
		s.bad = true
		return nil, false
	}
	k, _ = s.str()
	if s.peek() != ':' {
		s.bad = true
		return nil, false
	}
	s.i++
	return k, !s.bad
}

// elem reports whether an array opened with open('[') has another element,
// leaving the scanner at it.
func (s *jsonScanner) elem() bool {
	if s.bad {
		return false
	}
	c := s.peek()
	if c == ',' {
		s.i++
		c = s.peek()
	}
	switch c {
	case ']':
		s.i++
		return false
	case 0:
		s.bad = true
		return false
	}
	return true
}

// str consumes a string and returns its raw (still escaped) contents.
func (s *jsonScanner) str() (raw []byte, escaped bool) {
	if s.peek() != '"' {
		s.skip()
		return nil, false
	}
	start := s.i + 1
	// Keys and most values are short: a plain loop beats a vectorised scan
	// there, and it tells escaped strings apart in the same pass.
	head := s.b[start:]
	if len(head) > 32 {
		head = head[:32]
	}
	for j, c := range head {
		if c == '"' {
			s.i = start + j + 1
			return head[:j], false
		}
		if c == '\\' {
			break
		}
	}
	return s.longStr(start)
}

// longStr finds the closing quote of a string starting at start with
// closingQuote's vectorised scan.
func (s *jsonScanner) longStr(start int) (raw []byte, escaped bool) {
	end := closingQuote(s.b[start:])
	if end < 0 {
		s.bad = true
		s.i = len(s.b)
		return nil, false
	}
	s.i = start + end + 1
	raw = s.b[start : start+end]
	return raw, bytes.IndexByte(raw, '\\') >= 0
}

// closingQuote is the index in b (a JSON string's contents and what
// follows) of the quote that ends the string: the first quote preceded by
// an even run of backslashes (an odd run escapes it). -1 when none. The
// observer's scanner and the SSE template agree on where a string ends
// because both use it.
func closingQuote(b []byte) int {
	for j := 0; ; {
		q := bytes.IndexByte(b[j:], '"')
		if q < 0 {
			return -1
		}
		end := j + q
		bs := 0
		for k := end - 1; k >= 0 && b[k] == '\\'; k-- {
			bs++
		}
		if bs%2 == 0 {
			return end
		}
		j = end + 1
	}
}

// int consumes a number and returns its integer part; ok is false for
// anything that is not a number (the value is skipped).
func (s *jsonScanner) int() (v int64, ok bool) {
	c := s.peek()
	if c != '-' && (c < '0' || c > '9') {
		s.skip()
		return 0, false
	}
	neg := c == '-'
	if neg {
		s.i++
	}
	digits := 0
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		if v < (1<<63-1)/10 {
			v = v*10 + int64(s.b[s.i]-'0')
		}
		s.i++
		digits++
	}
	// Fraction and exponent are consumed and ignored: the fields read this
	// way are integer counts and nanosecond stamps.
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case '.', 'e', 'E', '+', '-':
			s.i++
			continue
		}
		if s.b[s.i] >= '0' && s.b[s.i] <= '9' {
			s.i++
			continue
		}
		break
	}
	if digits == 0 {
		s.bad = true
		return 0, false
	}
	if neg {
		v = -v
	}
	return v, true
}

// skip consumes one value of any kind, iteratively (no recursion, so deep
// nesting cannot overflow the stack).
func (s *jsonScanner) skip() {
	depth := 0
	for {
		c := s.peek()
		switch c {
		case 0:
			s.bad = true
			return
		case '"':
			s.str()
		case '{', '[':
			depth++
			s.i++
			continue
		case '}', ']':
			if depth == 0 {
				s.bad = true
				return
			}
			depth--
			s.i++
		case ',', ':':
			if depth == 0 {
				s.bad = true
				return
			}
			s.i++
			continue
		default:
			// A scalar literal: up to the next delimiter.
			start := s.i
			for s.i < len(s.b) {
				switch s.b[s.i] {
				case ',', '}', ']', ' ', '\t', '\n', '\r', ':', '"', '{', '[':
					goto done
				}
				s.i++
			}
		done:
			if s.i == start {
				s.bad = true
				return
			}
		}
		if s.bad || depth == 0 {
			return
		}
	}
}
