package jsonscan

import "fmt"

// SyntaxError is where and why Check refused a value.
type SyntaxError struct {
	Offset int // the byte in the input that broke the grammar
	Msg    string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("invalid JSON at byte %d: %s", e.Offset, e.Msg)
}

// Check is Value that says why: it accepts exactly what Value accepts (one
// value at b[i], white space already skipped, nested at most maxDepth
// containers deep) and returns the index after it, or where and why it is
// not JSON. Only a refused value is walked a second time, to find the
// reason, so an accepted one costs what Value costs.
func Check(b []byte, i, maxDepth int) (int, *SyntaxError) {
	if end, ok := Value(b, i, maxDepth); ok {
		return end, nil
	}
	return 0, explainValue(b, i, maxDepth)
}

// CheckString is String that says why it refused the string at b[i].
func CheckString(b []byte, i int) (end int, escaped bool, err *SyntaxError) {
	if end, escaped, ok := String(b, i); ok {
		return end, escaped, nil
	}
	return 0, false, explainString(b, i)
}

func syntaxErr(i int, format string, args ...any) *SyntaxError {
	return &SyntaxError{Offset: i, Msg: fmt.Sprintf(format, args...)}
}

// explainString finds why String refused the string at b[start].
func explainString(b []byte, start int) *SyntaxError {
	for i := start + 1; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			// String refused a string this walk accepts: they disagree,
			// which FuzzCheck would catch.
			return syntaxErr(start, "invalid string")
		case c == '\\':
			if i+1 >= len(b) {
				return syntaxErr(i, "unterminated escape")
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i++
			case 'u':
				if i+6 > len(b) || !hex4(b[i+2:i+6]) {
					return syntaxErr(i, `\u must be followed by four hex digits`)
				}
				i += 5
			default:
				return syntaxErr(i, "invalid escape \\%c", b[i+1])
			}
		case c < 0x20:
			return syntaxErr(i, "control character 0x%02x in a string", c)
		}
	}
	return syntaxErr(start, "unterminated string")
}

// explainValue walks the value Value refused at b[i] again, keeping the
// open containers on an explicit stack, to say where and why.
func explainValue(b []byte, i, maxDepth int) *SyntaxError {
	if i < len(b) && Space(b, i) != i {
		return syntaxErr(i, "unexpected character %q", b[i]) // as Value, which starts at a value
	}
	var buf [64]byte
	stack := buf[:0] // '{' or '[' per open container
	for {
		// Expect a value at i.
		i = Space(b, i)
		if i >= len(b) {
			return syntaxErr(i, "unexpected end of input, expected a value")
		}
		switch c := b[i]; {
		case c == '{' || c == '[':
			if len(stack) == maxDepth {
				return syntaxErr(i, "nested deeper than %d levels", maxDepth)
			}
			stack = append(stack, c)
			i = Space(b, i+1)
			if i < len(b) && (c == '{' && b[i] == '}' || c == '[' && b[i] == ']') {
				stack = stack[:len(stack)-1]
				i++
				break
			}
			if c == '{' {
				var err *SyntaxError
				if i, err = explainKey(b, i); err != nil {
					return err
				}
			}
			continue
		case c == '"':
			end, _, err := CheckString(b, i)
			if err != nil {
				return err
			}
			i = end
		case c == '-' || '0' <= c && c <= '9':
			end, ok := Number(b, i)
			if !ok {
				return syntaxErr(i, "invalid number")
			}
			i = end
		case c == 't' || c == 'f' || c == 'n':
			end, ok := Scalar(b, i)
			if !ok {
				return syntaxErr(i, "invalid literal")
			}
			i = end
		default:
			return syntaxErr(i, "unexpected character %q", c)
		}
		// A value ended at i: close containers or move to the next element.
		for {
			if len(stack) == 0 {
				// Value refused what this walk accepts: they disagree,
				// which FuzzCheck would catch.
				return syntaxErr(i, "invalid value")
			}
			i = Space(b, i)
			if i >= len(b) {
				return syntaxErr(i, "unterminated %s", containerName(stack[len(stack)-1]))
			}
			top := stack[len(stack)-1]
			c := b[i]
			if c == ',' {
				i++
				if top == '{' {
					var err *SyntaxError
					if i, err = explainKey(b, Space(b, i)); err != nil {
						return err
					}
				}
				break
			}
			if top == '{' && c == '}' || top == '[' && c == ']' {
				stack = stack[:len(stack)-1]
				i++
				continue
			}
			if top == '{' {
				return syntaxErr(i, "expected ',' or '}' after a member")
			}
			return syntaxErr(i, "expected ',' or the end of the array")
		}
	}
}

// explainKey checks `"name" :` at b[i] and returns the index after the
// colon.
func explainKey(b []byte, i int) (int, *SyntaxError) {
	if i >= len(b) || b[i] != '"' {
		return 0, syntaxErr(i, "expected a member name")
	}
	end, _, err := CheckString(b, i)
	if err != nil {
		return 0, err
	}
	i = Space(b, end)
	if i >= len(b) || b[i] != ':' {
		return 0, syntaxErr(i, "expected ':' after a member name")
	}
	return i + 1, nil
}

func containerName(c byte) string {
	if c == '{' {
		return "object"
	}
	return "array"
}
