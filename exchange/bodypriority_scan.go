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
	i, empty := jsonscan.Enter(s.b, open)
	if empty {
		return nil, i, false, nil
	}
	from := open + 1
	segs = make([]segment, 0, 16)
	for more := true; more; {
		name, escaped, v, ok := jsonscan.Member(s.b, i)
		if !ok {
			return nil, 0, false, s.refused(open)
		}
		isPrio := jsonscan.KeyEqualFold(name, escaped, priorityKey)
		end, ok := jsonscan.Value(s.b, v, math.MaxInt)
		if !ok {
			return nil, 0, false, s.refused(open)
		}
		to := s.ws(end) // the ',' or '}' after the member
		if i, more, ok = jsonscan.Next(s.b, to, '}'); !ok {
			return nil, 0, false, s.refused(open)
		}
		segs = append(segs, segment{from: from, to: to, priority: isPrio})
		hit = hit || isPrio
		from = to + 1
	}
	return segs, i, hit, nil
}

// refused is the error for the object at b[open], which the walk found
// broken: where and why, from jsonscan.Check.
func (s *strictJSON) refused(open int) error {
	if _, serr := jsonscan.Check(s.b, open, math.MaxInt); serr != nil {
		return fmt.Errorf("%w: %w", ErrPriorityBody, serr)
	}
	// The walk refused what Check accepts: they disagree, which
	// FuzzRewriteJSONPriority would catch.
	return s.fail(open, "invalid object")
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
