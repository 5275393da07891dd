package client

import (
	"bytes"
	"encoding/json"
)

// fastTokenEvent decides whether a streamed chunk carries an output token
// without decoding it into Go values: it walks the (validated) JSON once
// and looks only at choices[*].text and choices[*].delta.content. ok is
// false whenever the event could mean more than that — usage, an error,
// ground truth, a message, duplicate or case-variant or escaped keys
// (encoding/json matches keys case-insensitively and unescapes them),
// values of unexpected types — and the caller then decodes it fully. It
// saves most of the allocations per event, which dominate the harness's
// cost at 100,000 chunks/s. FuzzFastTokenEvent checks it against the full
// decoder.
func fastTokenEvent(data []byte) (token, ok bool) {
	data = bytes.Trim(data, " \t\r\n")
	if len(data) == 0 || data[0] != '{' || !json.Valid(data) {
		return false, false
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
			return false, false // a choice that is not an object (or null)
		}
		switch c {
		case '{':
			stack = append(stack, frame{obj: true})
			expectKey = true
		case '[':
			stack = append(stack, frame{})
		case '"':
			j := i + 1
			for data[j] != '"' {
				if data[j] == '\\' {
					j++
				}
				j++
			}
			s := data[i+1 : j]
			i = j
			if !expectKey {
				continue
			}
			expectKey = false
			top := &stack[len(stack)-1]
			top.key = s
			if bytes.IndexByte(s, '\\') >= 0 {
				return false, false // an escaped key might decode to a special one
			}
			sp := special(s)
			if sp == -2 {
				return false, false
			}
			if sp < 0 {
				continue // the decoder ignores this key, duplicates included
			}
			if !bytes.Equal(s, specialKeys[sp]) || sp >= 4 || top.seen(sp) {
				// Case variants, keys only the decoder handles, duplicates.
				return false, false
			}
			v := bytes.TrimLeft(data[i+1:], " \t\r\n:")
			want := valueKind(stack, s)
			switch {
			case want == 0:
			case bytes.HasPrefix(v, []byte("null")):
			case want == '"' && v[0] == '"':
				if v[1] != '"' {
					token = true
				}
			case want != '"' && v[0] == want:
			default:
				return false, false
			}
		}
	}
	return token, true
}

// frame is one open object or array.
type frame struct {
	obj      bool
	key      []byte // the key whose value is being read
	seenBits uint8  // special keys seen, as bits
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
