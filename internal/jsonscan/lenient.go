package jsonscan

import "bytes"

// Lenient is the lenient mode: a cursor that walks just enough JSON to pull
// out the fields a reader needs (the observer's reading of response
// chunks), without allocating and without building values. It tolerates
// more than encoding/json on purpose: what it skips is checked for nesting
// and string termination only (not every literal, number or escape), and
// an object's members may be separated by nothing, because a response the
// engine already sent is counted, not judged; input that is truncated or
// garbled in those ways still marks it Bad. Every JSON object json.Valid
// accepts it reads without going Bad (FuzzScanChunk in exchange).
type Lenient struct {
	b   []byte
	i   int
	bad bool
}

// NewLenient returns a cursor at the start of b.
func NewLenient(b []byte) Lenient { return Lenient{b: b} }

// Pos is the cursor's index in b.
func (s *Lenient) Pos() int { return s.i }

// Bad reports whether the input was found truncated or garbled; every
// call after that reports nothing.
func (s *Lenient) Bad() bool { return s.bad }

func (s *Lenient) ws() { s.i = Space(s.b, s.i) }

// Peek returns the next non-space byte, or 0 at the end.
func (s *Lenient) Peek() byte {
	s.ws()
	if s.i >= len(s.b) {
		return 0
	}
	return s.b[s.i]
}

// Open consumes c ('{' or '[') and reports whether it was there. A null is
// consumed and reported as absent; any other value is skipped.
func (s *Lenient) Open(c byte) bool {
	switch s.Peek() {
	case c:
		s.i++
		return true
	case 0:
		s.bad = true
		return false
	}
	s.Skip()
	return false
}

// Key returns the next member name of an object opened with Open('{') and
// leaves the scanner at its value; ok is false at the closing brace.
func (s *Lenient) Key() (k []byte, ok bool) {
	if s.bad {
		return nil, false
	}
	c := s.Peek()
	if c == ',' {
		s.i++
		c = s.Peek()
	}
	if c == '}' {
		s.i++
		return nil, false
	}
	if c != '"' {
		s.bad = true
		return nil, false
	}
	k, _ = s.Str()
	if s.Peek() != ':' {
		s.bad = true
		return nil, false
	}
	s.i++
	return k, !s.bad
}

// Elem reports whether an array opened with Open('[') has another element,
// leaving the scanner at it.
func (s *Lenient) Elem() bool {
	if s.bad {
		return false
	}
	c := s.Peek()
	if c == ',' {
		s.i++
		c = s.Peek()
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

// Str consumes a string and returns its raw (still escaped) contents.
func (s *Lenient) Str() (raw []byte, escaped bool) {
	if s.Peek() != '"' {
		s.Skip()
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
// ClosingQuote's vectorised scan.
func (s *Lenient) longStr(start int) (raw []byte, escaped bool) {
	end := ClosingQuote(s.b[start:])
	if end < 0 {
		s.bad = true
		s.i = len(s.b)
		return nil, false
	}
	s.i = start + end + 1
	raw = s.b[start : start+end]
	return raw, bytes.IndexByte(raw, '\\') >= 0
}

// ClosingQuote is the index in b (a JSON string's contents and what
// follows) of the quote that ends the string: the first quote preceded by
// an even run of backslashes (an odd run escapes it). -1 when none. It does
// not validate the contents (Lenient mode). The observer's scanner and its
// SSE template agree on where a string ends because both use it.
func ClosingQuote(b []byte) int {
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

// Int consumes a number and returns its integer part; ok is false for
// anything that is not a number (the value is skipped).
func (s *Lenient) Int() (v int64, ok bool) {
	c := s.Peek()
	if c != '-' && (c < '0' || c > '9') {
		s.Skip()
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

// Skip consumes one value of any kind, iteratively (no recursion, so deep
// nesting cannot overflow the stack).
func (s *Lenient) Skip() {
	depth := 0
	for {
		c := s.Peek()
		switch c {
		case 0:
			s.bad = true
			return
		case '"':
			s.Str()
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
