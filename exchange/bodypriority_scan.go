package exchange

import (
	"fmt"

	"github.com/llmesh/llmesh/internal/jsonscan"
)

// The strict JSON scanner behind RewriteJSONPriority: RFC 8259 only, so
// that nothing it accepts can be read differently by another parser.

// segment is one object member with the white space around it: the bytes
// between the separators ('{' or ',' before it, ',' or '}' after it).
type segment struct {
	from, to int
	priority bool
}

// strictJSON validates JSON without building values; it never recurses, so
// nesting depth costs one byte per level (on the heap past 64 levels).
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
// after its closing quote and whether it contains escapes. jsonscan
// decides; only a string it refuses is walked again, to say why.
func (s *strictJSON) str(i int) (end int, escaped bool, err error) {
	if end, escaped, ok := jsonscan.String(s.b, i); ok {
		return end, escaped, nil
	}
	return 0, false, s.badString(i)
}

// badString explains why jsonscan.String refused the string at b[start].
func (s *strictJSON) badString(start int) error {
	for i := start + 1; i < len(s.b); i++ {
		switch c := s.b[i]; {
		case c == '"':
			// jsonscan.String refused a string this walk accepts: they
			// disagree, which FuzzRewriteJSONPriority would catch.
			return s.fail(start, "invalid string")
		case c == '\\':
			if i+1 >= len(s.b) {
				return s.fail(i, "unterminated escape")
			}
			switch s.b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i++
			case 'u':
				if i+6 > len(s.b) || !isHex4(s.b[i+2:i+6]) {
					return s.fail(i, `\u must be followed by four hex digits`)
				}
				i += 5
			default:
				return s.fail(i, "invalid escape \\%c", s.b[i+1])
			}
		case c < 0x20:
			return s.fail(i, "control character 0x%02x in a string", c)
		}
	}
	return s.fail(start, "unterminated string")
}

func isHex4(b []byte) bool {
	for _, c := range b {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// value validates one JSON value starting at b[i] and returns the index
// after it. Containers are tracked on an explicit stack.
func (s *strictJSON) value(i int) (int, error) {
	var buf [64]byte
	stack := buf[:0] // '{' or '[' per open container; on the stack while shallow
	for {
		// Expect a value at i.
		i = s.ws(i)
		if i >= len(s.b) {
			return 0, s.fail(i, "unexpected end of input, expected a value")
		}
		switch c := s.b[i]; {
		case c == '{' || c == '[':
			stack = append(stack, c)
			i = s.ws(i + 1)
			if i < len(s.b) && (c == '{' && s.b[i] == '}' || c == '[' && s.b[i] == ']') {
				stack = stack[:len(stack)-1]
				i++
				break
			}
			if c == '{' {
				var err error
				if i, err = s.key(i); err != nil {
					return 0, err
				}
			}
			continue
		case c == '"':
			end, _, err := s.str(i)
			if err != nil {
				return 0, err
			}
			i = end
		case c == '-' || '0' <= c && c <= '9':
			end, err := s.number(i)
			if err != nil {
				return 0, err
			}
			i = end
		case c == 't':
			end, ok := jsonscan.Literal(s.b, i, "true")
			if !ok {
				return 0, s.fail(i, "invalid literal")
			}
			i = end
		case c == 'f':
			end, ok := jsonscan.Literal(s.b, i, "false")
			if !ok {
				return 0, s.fail(i, "invalid literal")
			}
			i = end
		case c == 'n':
			end, ok := jsonscan.Literal(s.b, i, "null")
			if !ok {
				return 0, s.fail(i, "invalid literal")
			}
			i = end
		default:
			return 0, s.fail(i, "unexpected character %q", c)
		}
		// A value ended at i: close containers or move to the next element.
		for {
			if len(stack) == 0 {
				return i, nil
			}
			i = s.ws(i)
			if i >= len(s.b) {
				return 0, s.fail(i, "unterminated %s", containerName(stack[len(stack)-1]))
			}
			top := stack[len(stack)-1]
			c := s.b[i]
			if c == ',' {
				i++
				if top == '{' {
					var err error
					if i, err = s.key(s.ws(i)); err != nil {
						return 0, err
					}
				}
				break
			}
			if top == '{' && c == '}' || top == '[' && c == ']' {
				stack = stack[:len(stack)-1]
				i++
				continue
			}
			return 0, s.fail(i, "expected ',' or the end of the %s", containerName(top))
		}
	}
}

// key validates `"name" :` at b[i] and returns the index after the colon.
func (s *strictJSON) key(i int) (int, error) {
	if i >= len(s.b) || s.b[i] != '"' {
		return 0, s.fail(i, "expected a member name")
	}
	end, _, err := s.str(i)
	if err != nil {
		return 0, err
	}
	i = s.ws(end)
	if i >= len(s.b) || s.b[i] != ':' {
		return 0, s.fail(i, "expected ':' after a member name")
	}
	return i + 1, nil
}

func containerName(c byte) string {
	if c == '{' {
		return "object"
	}
	return "array"
}

// number validates -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?.
func (s *strictJSON) number(i int) (int, error) {
	end, ok := jsonscan.Number(s.b, i)
	if !ok {
		return 0, s.fail(i, "invalid number")
	}
	return end, nil
}
