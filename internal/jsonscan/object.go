package jsonscan

// The strict walk of a container's members or elements, for callers that
// read some of them and validate the rest (request sizing, relocation's
// edit, the priority guard):
//
//	i, empty := Enter(b, open)
//	for more := !empty; more; {
//		name, escaped, v, ok := Member(b, i) // objects only
//		end, ok := Value(b, v, depth)        // or the caller's own reading
//		i, more, ok = Next(b, end, '}')
//	}
//	// i is the closing byte's index
//
// Each returns ok false where the grammar is broken; Check says why.

// Enter steps into the container ('{' or '[') at b[open]: i is the index
// of its first member or element, white space skipped, or, when the
// container is empty, of its closing byte.
func Enter(b []byte, open int) (i int, empty bool) {
	i = Space(b, open+1)
	if i < len(b) && (b[i] == '}' && b[open] == '{' || b[i] == ']' && b[open] == '[') {
		return i, true
	}
	return i, false
}

// Member reads a member's name and colon, `"name" :`, at b[i] (white space
// already skipped). It returns the name as String validated it (quotes
// included, escaped as String reported, for KeyEquals and KeyEqualFold)
// and the index of the member's value, white space skipped.
func Member(b []byte, i int) (name []byte, escaped bool, value int, ok bool) {
	if i >= len(b) || b[i] != '"' {
		return nil, false, 0, false
	}
	end, escaped, ok := String(b, i)
	if !ok {
		return nil, false, 0, false
	}
	j := Space(b, end)
	if j >= len(b) || b[j] != ':' {
		return nil, false, 0, false
	}
	return b[i:end], escaped, Space(b, j+1), true
}

// Next reads what follows a member or element that ended at b[i], in a
// container that closer (']' or '}') closes: after white space, either a
// comma (more is true, next the index of the following member or element,
// white space skipped) or closer (more is false, next its index).
func Next(b []byte, i int, closer byte) (next int, more, ok bool) {
	i = Space(b, i)
	if i >= len(b) {
		return 0, false, false
	}
	switch b[i] {
	case ',':
		return Space(b, i+1), true, true
	case closer:
		return i, false, true
	}
	return 0, false, false
}
