package exchange

import (
	"fmt"
	"math"

	"github.com/llmesh/llmesh/internal/jsonscan"
)

// The strict JSON walk behind RewriteJSONPriority: RFC 8259 only
// (jsonscan's strict mode), so that nothing it accepts can be read
// differently by another parser.

// segment is one object member with the white space around it: the bytes
// between the separators ('{' or ',' before it, ',' or '}' after it).
type segment struct {
	from, to int
	priority bool
}

// strictJSON walks the top-level members of a body on jsonscan's strict
// scanner, keeping each member's bytes as a segment.
type strictJSON struct{ b []byte }

func (s *strictJSON) fail(i int, format string, args ...any) error {
	return fmt.Errorf("%w: invalid JSON at byte %d: %s", ErrPriorityBody, i, fmt.Sprintf(format, args...))
}

func (s *strictJSON) ws(i int) int { return jsonscan.Space(s.b, i) }

// end checks that only white space follows the top-level value.
func (s *strictJSON) end(i int) error {
	if j := s.ws(i); j != len(s.b) {
		return s.fail(j, "data after the top-level value")
	}
	return nil
}

// members walks the top-level object opened at b[open] and returns its
// segments, the index of its closing brace, and whether any member is a
// priority.
func (s *strictJSON) members(open int) (segs []segment, closeAt int, hit bool, err error) {
	i := s.ws(open + 1)
	if i < len(s.b) && s.b[i] == '}' {
		return nil, i, false, nil
	}
	from := open + 1
	segs = make([]segment, 0, 16)
	for {
		i = s.ws(i)
		if i >= len(s.b) || s.b[i] != '"' {
			return nil, 0, false, s.fail(i, "expected a member name")
		}
		kend, escaped, err := s.str(i)
		if err != nil {
			return nil, 0, false, err
		}
		isPrio := jsonscan.KeyEqualFold(s.b[i:kend], escaped, priorityKey)
		i = s.ws(kend)
		if i >= len(s.b) || s.b[i] != ':' {
			return nil, 0, false, s.fail(i, "expected ':' after a member name")
		}
		if i, err = s.value(s.ws(i + 1)); err != nil {
			return nil, 0, false, err
		}
		i = s.ws(i)
		if i >= len(s.b) {
			return nil, 0, false, s.fail(i, "unterminated object")
		}
		segs = append(segs, segment{from: from, to: i, priority: isPrio})
		hit = hit || isPrio
		switch s.b[i] {
		case ',':
			i++
			from = i
		case '}':
			return segs, i, hit, nil
		default:
			return nil, 0, false, s.fail(i, "expected ',' or '}' after a member")
		}
	}
}

// str validates the string starting at b[i] == '"' and returns the index
// after its closing quote and whether it contains escapes.
func (s *strictJSON) str(i int) (end int, escaped bool, err error) {
	end, escaped, serr := jsonscan.CheckString(s.b, i)
	if serr != nil {
		return 0, false, fmt.Errorf("%w: %w", ErrPriorityBody, serr)
	}
	return end, escaped, nil
}

// value validates one JSON value starting at b[i] and returns the index
// after it. Nesting is not limited: a body too deep for the engine's parser
// is refused there, so it hides no priority.
func (s *strictJSON) value(i int) (int, error) {
	end, serr := jsonscan.Check(s.b, i, math.MaxInt)
	if serr != nil {
		return 0, fmt.Errorf("%w: %w", ErrPriorityBody, serr)
	}
	return end, nil
}
