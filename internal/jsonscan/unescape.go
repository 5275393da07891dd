package jsonscan

import "unicode/utf8"

// AppendUnescaped appends the JSON string contents raw (between the
// quotes, as Lenient.Str returns them), decoded. It is lenient: an invalid
// escape is kept as its bytes (without the backslash for a single-byte one,
// as "\u" when the four hex digits are missing) and a lone surrogate
// becomes U+FFFD, so any bytes decode; on contents that encoding/json
// accepts it returns exactly what json.Unmarshal does (FuzzUnescape).
func AppendUnescaped(dst, raw []byte) []byte {
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if c != '\\' || i+1 >= len(raw) {
			dst = append(dst, c)
			continue
		}
		i++
		switch raw[i] {
		case 'n':
			dst = append(dst, '\n')
		case 't':
			dst = append(dst, '\t')
		case 'r':
			dst = append(dst, '\r')
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'u':
			r, n := decodeU(raw[i+1:])
			if n == 0 {
				dst = append(dst, '\\', 'u')
				continue
			}
			i += n
			if utf16Surrogate(r) {
				if len(raw) > i+2 && raw[i+1] == '\\' && raw[i+2] == 'u' {
					r2, n2 := decodeU(raw[i+3:])
					if n2 > 0 && r2 >= 0xDC00 && r2 <= 0xDFFF && r < 0xDC00 {
						r = 0x10000 + (r-0xD800)<<10 + (r2 - 0xDC00)
						i += 2 + n2
					} else {
						r = utf8.RuneError
					}
				} else {
					r = utf8.RuneError
				}
			}
			dst = utf8.AppendRune(dst, r)
		default: // '"', '\\', '/', and anything invalid kept as is
			dst = append(dst, raw[i])
		}
	}
	return dst
}

func utf16Surrogate(r rune) bool { return r >= 0xD800 && r <= 0xDFFF }

// decodeU reads 4 hex digits; n is 4, or 0 when they are not there.
func decodeU(b []byte) (r rune, n int) {
	if len(b) < 4 {
		return 0, 0
	}
	for _, c := range b[:4] {
		var h byte
		switch {
		case '0' <= c && c <= '9':
			h = c - '0'
		case 'a' <= c && c <= 'f':
			h = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			h = c - 'A' + 10
		default:
			return 0, 0
		}
		r = r<<4 | rune(h)
	}
	return r, 4
}
