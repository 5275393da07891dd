package client

// validJSON reports whether b is one valid JSON value, exactly as
// json.Valid does (same grammar, same nesting limit, no UTF-8 check), in
// one pass without the scanner's function call per byte: json.Valid was
// most of the fast path's cost per event. FuzzValidJSON holds the two to
// the same answer.
func validJSON(b []byte) bool {
	var buf [16]bool
	stack := buf[:0] // open containers, true for objects
	i := 0
	var ok bool
	for {
		// A value starts at i.
		i = skipSpace(b, i)
		if i >= len(b) {
			return false
		}
		switch c := b[i]; {
		case c == '{' || c == '[':
			if len(stack) >= maxNestingDepth {
				return false
			}
			obj := c == '{'
			i = skipSpace(b, i+1)
			if i < len(b) && (obj && b[i] == '}' || !obj && b[i] == ']') {
				i++
				break // an empty container is a complete value
			}
			stack = append(stack, obj)
			if obj {
				if i, ok = scanKey(b, i); !ok {
					return false
				}
			}
			continue
		case c == '"':
			if i, ok = scanString(b, i); !ok {
				return false
			}
		case c == '-' || c >= '0' && c <= '9':
			if i, ok = scanNumber(b, i); !ok {
				return false
			}
		case c == 't':
			if i, ok = scanLiteral(b, i, "true"); !ok {
				return false
			}
		case c == 'f':
			if i, ok = scanLiteral(b, i, "false"); !ok {
				return false
			}
		case c == 'n':
			if i, ok = scanLiteral(b, i, "null"); !ok {
				return false
			}
		default:
			return false
		}
		// A value ended at i: close containers until one continues.
		for {
			i = skipSpace(b, i)
			if len(stack) == 0 {
				return i == len(b)
			}
			if i >= len(b) {
				return false
			}
			obj := stack[len(stack)-1]
			if b[i] == ',' {
				if obj {
					if i, ok = scanKey(b, i+1); !ok {
						return false
					}
				} else {
					i++
				}
				break
			}
			if obj && b[i] == '}' || !obj && b[i] == ']' {
				stack = stack[:len(stack)-1]
				i++
				continue
			}
			return false
		}
	}
}

// maxNestingDepth is encoding/json's limit on nested containers.
const maxNestingDepth = 10000

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// scanKey reads `"key" :` at i (after spaces) and returns the index after
// the colon.
func scanKey(b []byte, i int) (int, bool) {
	i = skipSpace(b, i)
	if i >= len(b) || b[i] != '"' {
		return i, false
	}
	i, ok := scanString(b, i)
	if !ok {
		return i, false
	}
	i = skipSpace(b, i)
	if i >= len(b) || b[i] != ':' {
		return i, false
	}
	return i + 1, true
}

// scanString reads a string starting at the quote at i and returns the
// index after its closing quote.
func scanString(b []byte, i int) (int, bool) {
	for i++; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			return i + 1, true
		case c < 0x20:
			return i, false
		case c == '\\':
			i++
			if i >= len(b) {
				return i, false
			}
			switch b[i] {
			case 'b', 'f', 'n', 'r', 't', '\\', '/', '"':
			case 'u':
				if i+4 >= len(b) {
					return i, false
				}
				for _, h := range b[i+1 : i+5] {
					if !(h >= '0' && h <= '9' || h >= 'a' && h <= 'f' || h >= 'A' && h <= 'F') {
						return i, false
					}
				}
				i += 4
			default:
				return i, false
			}
		}
	}
	return i, false
}

// scanNumber reads -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? at i.
func scanNumber(b []byte, i int) (int, bool) {
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i = digits(b, i)
	default:
		return i, false
	}
	if i < len(b) && b[i] == '.' {
		j := digits(b, i+1)
		if j == i+1 {
			return j, false
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
			return j, false
		}
		i = j
	}
	return i, true
}

func digits(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}

func scanLiteral(b []byte, i int, lit string) (int, bool) {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return i, false
	}
	return i + len(lit), true
}
