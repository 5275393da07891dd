package exchange

import (
	"strings"
	"testing"
)

// requestShape writes a request-like JSON body steered by the bytes of a
// fuzz input, so that the fuzzer spends its time on what decides the
// decoding (field names in every case and spelling, values of every type
// for every field, repeats, nulls, nesting) rather than on finding JSON.
// Some bodies are cut short or get a stray byte, so that the invalid ones
// are held to json.Unmarshal's outcome too.
type requestShape struct {
	in  []byte
	out []byte
}

func (g *requestShape) pick(n int) int {
	if len(g.in) == 0 {
		return 0
	}
	c := g.in[0]
	g.in = g.in[1:]
	return int(c) % n
}

// shapeKeys are member names: the fields in exact, folded and
// non-ASCII-folding spellings, escaped ones, and names that are read by
// nobody.
var shapeKeys = []string{
	"model", "messages", "stream", "max_tokens", "prompt", "stream_options",
	"max_completion_tokens", "n", "best_of", "echo", "logprobs", "content",
	"include_usage", "role", "temperature", "MODEL", "Messages", "STREAM",
	"Max_Tokens", "N", "Content", "INCLUDE_USAGE", "Stream_Options",
	"ma\u212a_tokens", "\u017Ftream", "mod\\u0065l", "con\\u0074ent", "x",
	"model ", "", "modèl", "\xff",
}

var shapeStrings = []string{
	`""`, `"llama-3.1-8b"`, `"a\"b\\c\/\n\u00e9"`, `"\ud83d\ude00"`, `"\ud800"`,
	"\"caf\xc3\xa9\"", "\"\xff\xfe\"", `"0123456789abcdef0123456789"`, `"true"`, `"5"`,
}

var shapeNumbers = []string{
	"0", "1", "-1", "-0", "7", "64", "999999999999999999", "-999999999999999999",
	"9223372036854775807", "9223372036854775808", "-9223372036854775808",
	"1.5", "1e3", "2E-1", "0.0", "12345678901234567890123",
}

func (g *requestShape) ws() {
	if g.pick(4) == 0 {
		g.out = append(g.out, " \n\t\r"[g.pick(4)])
	}
}

func (g *requestShape) value(depth int) {
	g.ws()
	kinds := 8
	if depth > 3 {
		kinds = 5 // scalars only
	}
	switch g.pick(kinds) {
	case 0:
		g.out = append(g.out, shapeStrings[g.pick(len(shapeStrings))]...)
	case 1:
		g.out = append(g.out, shapeNumbers[g.pick(len(shapeNumbers))]...)
	case 2:
		g.out = append(g.out, "null"...)
	case 3:
		g.out = append(g.out, "true"...)
	case 4:
		g.out = append(g.out, "false"...)
	case 5, 6:
		g.object(depth + 1)
	case 7:
		g.out = append(g.out, '[')
		for k := range g.pick(4) {
			if k > 0 {
				g.out = append(g.out, ',')
			}
			g.value(depth + 1)
		}
		g.ws()
		g.out = append(g.out, ']')
	}
	g.ws()
}

func (g *requestShape) object(depth int) {
	g.out = append(g.out, '{')
	for k := range g.pick(7) {
		if k > 0 {
			g.out = append(g.out, ',')
		}
		g.ws()
		g.out = append(g.out, '"')
		key := shapeKeys[g.pick(len(shapeKeys))]
		g.out = append(g.out, key...)
		g.out = append(g.out, '"')
		g.ws()
		g.out = append(g.out, ':')
		if g.pick(4) == 3 || !g.typed(key, depth) {
			g.value(depth)
		}
	}
	g.ws()
	g.out = append(g.out, '}')
}

// typed writes a value of the type the field named key holds (or null),
// so that most bodies decode; it reports false for other keys.
func (g *requestShape) typed(key string, depth int) bool {
	g.ws()
	if g.pick(8) == 7 {
		g.out = append(g.out, "null"...)
		return true
	}
	switch strings.ToLower(key) {
	case "model":
		g.out = append(g.out, shapeStrings[g.pick(len(shapeStrings))]...)
	case "stream", "echo", "include_usage":
		g.out = append(g.out, [...]string{"true", "false"}[g.pick(2)]...)
	case "max_tokens", "max_completion_tokens", "n", "best_of":
		g.out = append(g.out, shapeNumbers[g.pick(8)]...)
	case "messages":
		g.out = append(g.out, '[')
		for k := range g.pick(4) {
			if k > 0 {
				g.out = append(g.out, ',')
			}
			if g.pick(6) == 0 {
				g.out = append(g.out, "null"...)
			} else {
				g.object(depth + 1)
			}
		}
		g.out = append(g.out, ']')
	case "stream_options":
		g.object(depth + 1)
	default:
		return false
	}
	g.ws()
	return true
}

// body returns the body for the input.
func (g *requestShape) body() []byte {
	if g.pick(16) == 15 {
		g.value(0) // any top-level value
	} else {
		g.ws()
		g.object(0)
		g.ws()
	}
	switch g.pick(32) {
	case 30:
		if n := len(g.out); n > 0 {
			g.out = g.out[:g.pick(n)] // cut short
		}
	case 31:
		at := g.pick(len(g.out) + 1)
		const strays = "{}[],:\"\\x0\x01"
		stray := strays[g.pick(len(strays))]
		g.out = append(g.out[:at], append([]byte{stray}, g.out[at:]...)...)
	}
	return g.out
}

// FuzzParseOpenAIRequestShapes is FuzzParseOpenAIRequest over generated
// request-like bodies.
func FuzzParseOpenAIRequestShapes(f *testing.F) {
	for _, s := range []string{"", "\x01\x05\x00\x02", "\x00\x03\x06\x01\x05\x01\x01\x05\x02", "\x07\x06\x01\x00\x05\x01\x00\x03\x06\x02\x0b\x00\x01"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		g := requestShape{in: in}
		checkParseOpenAIRequest(t, g.body())
	})
}
