package client

import (
	"bytes"
	"strconv"

	"github.com/llmesh/llmesh/bench/result"
	"github.com/llmesh/llmesh/internal/jsonscan"
)

// fastFields is what fastEvent read from an event.
type fastFields struct {
	token bool // a choice carries text or delta content
	// usage is usage.completion_tokens; -1 when the event has no usage.
	usage int
	// engine is llmesh_engine, when the event has it.
	engine    result.EngineTimes
	hasEngine bool
}

// fastEvent reads a streamed chunk without decoding it into Go values: it
// walks the (validated) JSON once and looks only at choices[*].text,
// choices[*].delta.content and the integer fields of a top-level usage and
// llmesh_engine object. ok is false whenever the event could mean more
// than that — an error, a message, duplicate or case-variant or escaped
// keys (encoding/json matches keys case-insensitively and unescapes them),
// values of unexpected types, null usage or ground truth, numbers that are
// not plain integers — and the caller then decodes it fully. It saves most
// of the allocations per event, which dominate the harness's cost at
// 100,000 chunks/s, and the two full decodes per request of the final
// chunks (ground truth, usage). FuzzFastEvent checks it against the full
// decoder.
func fastEvent(data []byte) (f fastFields, ok bool) {
	f.usage = -1
	data = bytes.Trim(data, " \t\r\n")
	if len(data) == 0 || data[0] != '{' || !jsonscan.Valid(data) {
		return f, false
	}
	var buf [8]frame
	stack := buf[:0]
	expectKey := false
	for i := 0; i < len(data); i++ {
		c := data[i]
		switch c {
		case ' ', '\t', '\r', '\n', ':':
			continue
		case ',':
			expectKey = len(stack) > 0 && stack[len(stack)-1].obj
			continue
		case '}', ']':
			stack = stack[:len(stack)-1]
			expectKey = false
			continue
		}
		if !expectKey && inChoices(stack) && c != '{' && c != 'n' {
			return f, false // a choice that is not an object (or null)
		}
		switch c {
		case '{':
			stack = append(stack, frame{obj: true})
			expectKey = true
		case '[':
			stack = append(stack, frame{})
		case '"':
			end, escaped, _ := jsonscan.String(data, i) // data is valid
			s := data[i+1 : end-1]
			i = end - 1
			if !expectKey {
				continue
			}
			expectKey = false
			top := &stack[len(stack)-1]
			top.key = s
			if escaped {
				return f, false // an escaped key might decode to a special one
			}
			v := bytes.TrimLeft(data[i+1:], " \t\r\n:")
			if fields, isUsage := intFields(stack); fields != nil {
				k := fieldIndex(fields, s)
				if k == -2 {
					return f, false
				}
				if k >= 0 {
					n, isInt := plainInt(v)
					if !bytes.Equal(s, fields[k]) || top.fieldSeen(k) || !isInt {
						return f, false
					}
					if isUsage {
						f.usage = int(n)
					} else {
						setEngine(&f.engine, k, n)
					}
				}
			}
			sp := special(s)
			if sp == -2 {
				return f, false
			}
			if sp < 0 {
				continue // the decoder ignores this key, duplicates included
			}
			if !bytes.Equal(s, specialKeys[sp]) || top.seen(sp) {
				// Case variants, duplicates.
				return f, false
			}
			if sp >= 4 {
				// Only a top-level usage or llmesh_engine object is read
				// here; anything else (errors, messages, null) is left to
				// the decoder.
				switch {
				case len(stack) != 1 || v[0] != '{':
					return f, false
				case sp == spUsage:
					f.usage = 0
				case sp == spEngine:
					f.hasEngine = true
				default:
					return f, false
				}
				continue
			}
			want := valueKind(stack, s)
			switch {
			case want == 0:
			case bytes.HasPrefix(v, []byte("null")):
			case want == '"' && v[0] == '"':
				if v[1] != '"' {
					f.token = true
				}
			case want != '"' && v[0] == want:
			default:
				return f, false
			}
		}
	}
	return f, true
}

// Indexes of specialKeys read by fastEvent beyond the token fields.
const (
	spUsage  = 5
	spEngine = 7
)

// The integer fields the decoder reads from usage and llmesh_engine, in
// setEngine's order.
var (
	usageFields  = [][]byte{[]byte("completion_tokens")}
	engineFields = [][]byte{[]byte("arrival_ns"), []byte("first_scheduled_ns"), []byte("first_token_ns"), []byte("finish_ns"), []byte("preemptions")}
)

// intFields returns the fields of the object being read when it is the
// top-level usage (isUsage) or llmesh_engine object, else nil.
func intFields(stack []frame) (fields [][]byte, isUsage bool) {
	if len(stack) != 2 || !stack[1].obj {
		return nil, false
	}
	switch {
	case bytes.Equal(stack[0].key, specialKeys[spUsage]):
		return usageFields, true
	case bytes.Equal(stack[0].key, specialKeys[spEngine]):
		return engineFields, false
	}
	return nil, false
}

// fieldIndex is the index of the field k decodes to (case-insensitively),
// -1 for none, -2 for a non-ASCII key.
func fieldIndex(fields [][]byte, k []byte) int {
	for _, c := range k {
		if c >= 0x80 {
			return -2
		}
	}
	for i, f := range fields {
		if bytes.EqualFold(f, k) {
			return i
		}
	}
	return -1
}

// plainInt parses a JSON integer literal (-?[0-9]+, as jsonscan.Valid has
// already checked) at the start of v; false for anything else (null,
// fractions, exponents, out of int64's range), which the decoder treats
// differently.
func plainInt(v []byte) (int64, bool) {
	j := 0
	if j < len(v) && v[j] == '-' {
		j++
	}
	start := j
	for j < len(v) && v[j] >= '0' && v[j] <= '9' {
		j++
	}
	if j == start || (j < len(v) && (v[j] == '.' || v[j] == 'e' || v[j] == 'E')) {
		return 0, false
	}
	n, err := strconv.ParseInt(string(v[:j]), 10, 64)
	return n, err == nil
}

func setEngine(e *result.EngineTimes, k int, n int64) {
	switch k {
	case 0:
		e.ArrivalNS = n
	case 1:
		e.FirstScheduledNS = n
	case 2:
		e.FirstTokenNS = n
	case 3:
		e.FinishNS = n
	case 4:
		e.Preemptions = int(n)
	}
}

// frame is one open object or array.
type frame struct {
	obj       bool
	key       []byte // the key whose value is being read
	seenBits  uint8  // special keys seen, as bits
	fieldBits uint8  // integer fields seen (usage, llmesh_engine), as bits
}

// fieldSeen records integer field k and reports whether it was already
// there.
func (f *frame) fieldSeen(k int) bool {
	bit := uint8(1) << k
	if f.fieldBits&bit != 0 {
		return true
	}
	f.fieldBits |= bit
	return false
}

// seen records special key sp and reports whether it was already there.
func (f *frame) seen(sp int) bool {
	bit := uint8(1) << sp
	if f.seenBits&bit != 0 {
		return true
	}
	f.seenBits |= bit
	return false
}

// special returns the index in specialKeys of the key that decodes to the
// same field as k (case-insensitively), -1 for none, -2 for a non-ASCII
// key (Unicode folding, as in "uſage", is left to the decoder).
func special(k []byte) int {
	for _, c := range k {
		if c >= 0x80 {
			return -2
		}
	}
	switch len(k) {
	case 4, 5, 7, 13:
	default:
		return -1
	}
	for i, s := range specialKeys {
		if len(s) == len(k) && bytes.EqualFold(s, k) {
			return i
		}
	}
	return -1
}

var specialKeys = [][]byte{[]byte("choices"), []byte("text"), []byte("delta"), []byte("content"), []byte("message"), []byte("usage"), []byte("error"), []byte("llmesh_engine")}

// inChoices reports whether the innermost container is the choices array.
func inChoices(stack []frame) bool {
	return len(stack) == 2 && !stack[1].obj && bytes.Equal(stack[0].key, specialKeys[0])
}

// valueKind is what the decoder needs for key k in the innermost object:
// '[' for choices, '{' for a choice's delta, '"' for a choice's text and a
// delta's content, 0 for anything it ignores.
func valueKind(stack []frame, k []byte) byte {
	switch {
	case len(stack) == 1 && bytes.Equal(k, specialKeys[0]):
		return '['
	case len(stack) == 3 && inChoices(stack[:2]) && bytes.Equal(k, specialKeys[1]):
		return '"'
	case len(stack) == 3 && inChoices(stack[:2]) && bytes.Equal(k, specialKeys[2]):
		return '{'
	case len(stack) == 4 && inChoices(stack[:2]) && bytes.Equal(stack[2].key, specialKeys[2]) && bytes.Equal(k, specialKeys[3]):
		return '"'
	}
	return 0
}
