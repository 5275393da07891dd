package exchange

import (
	"encoding/json"
	"unicode/utf8"

	"github.com/llmesh/llmesh/internal/jsonscan"
)

// skipDepth bounds the nesting of a value the fast path skips; deeper
// values (encoding/json allows jsonscan.MaxDepth levels) are left to
// encoding/json to accept or refuse.
const skipDepth = 1000

// The fast path of ParseOpenAIRequest: one validating pass over the common
// shape of a request. It reports false, and leaves the body to
// encoding/json, whenever the outcome would depend on a corner of
// encoding/json it does not reproduce; it never reports success for a body
// json.Unmarshal would refuse.

// reqField is the OpenAIRequest field a top-level key sets.
type reqField uint8

const (
	reqOther reqField = iota // ignored (still validated)
	reqModel
	reqStream
	reqMaxTokens
	reqMaxCompletionTokens
	reqPrompt
	reqMessages
	reqN
	reqBestOf
	reqEcho
	reqLogprobs
	reqStreamOptions
	reqUnsure // encoding/json's own matching must decide
	reqFields
)

// topField matches a top-level key (the bytes between the quotes, free of
// escapes) as encoding/json does: exactly, else ignoring case. For ASCII
// keys that is ASCII case folding; other keys may fold onto a field name
// (U+212A KELVIN SIGN folds to k), so they are left unsure.
func topField(key []byte) reqField {
	switch string(key) { // the exact names, as sent by every client
	case "model":
		return reqModel
	case "messages":
		return reqMessages
	case "stream":
		return reqStream
	case "max_tokens":
		return reqMaxTokens
	case "prompt":
		return reqPrompt
	case "stream_options":
		return reqStreamOptions
	case "max_completion_tokens":
		return reqMaxCompletionTokens
	case "n":
		return reqN
	case "best_of":
		return reqBestOf
	case "echo":
		return reqEcho
	case "logprobs":
		return reqLogprobs
	}
	for _, c := range key {
		if c >= utf8.RuneSelf {
			return reqUnsure
		}
	}
	switch len(key) {
	case 1:
		if foldIs(key, "n") {
			return reqN
		}
	case 4:
		if foldIs(key, "echo") {
			return reqEcho
		}
	case 5:
		if foldIs(key, "model") {
			return reqModel
		}
	case 6:
		switch {
		case foldIs(key, "stream"):
			return reqStream
		case foldIs(key, "prompt"):
			return reqPrompt
		}
	case 7:
		if foldIs(key, "best_of") {
			return reqBestOf
		}
	case 8:
		switch {
		case foldIs(key, "messages"):
			return reqMessages
		case foldIs(key, "logprobs"):
			return reqLogprobs
		}
	case 10:
		if foldIs(key, "max_tokens") {
			return reqMaxTokens
		}
	case 14:
		if foldIs(key, "stream_options") {
			return reqStreamOptions
		}
	case 21:
		if foldIs(key, "max_completion_tokens") {
			return reqMaxCompletionTokens
		}
	}
	return reqOther
}

// foldIs reports whether the ASCII key is name (lower case) up to case.
func foldIs(key []byte, name string) bool {
	if len(key) != len(name) {
		return false
	}
	for i, c := range key {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != name[i] {
			return false
		}
	}
	return true
}

// nestedField matches a key of a message or of stream_options against the
// one field read there: 1 if it is that field, 0 if not, -1 if unsure.
func nestedField(key []byte, name string) int {
	if string(key) == name {
		return 1
	}
	for _, c := range key {
		if c >= utf8.RuneSelf {
			return -1
		}
	}
	if foldIs(key, name) {
		return 1
	}
	return 0
}

// span is a raw value in the body, b[from:to]; empty when unset.
type span struct{ from, to int }

// reqParser holds what the fast path has read so far. Raw values are kept
// as spans and copied into one allocation at the end; the integers and
// stream_options share another. Nothing in it points into itself, so that
// it stays on the stack.
type reqParser struct {
	b        []byte
	prompt   span
	logprobs span
	// contents has one span per message, empty for one without content:
	// the first len(small) in small, the rest in more.
	small   [8]span
	more    []span
	nmsg    int
	seen    [reqFields]bool
	isArray bool // messages was an array (possibly empty), not null
	cur     span // the content of the message being read
	block   *reqBlock
}

// reqBlock holds the values the request points to, in one allocation.
type reqBlock struct {
	ints [4]int // max_tokens, max_completion_tokens, n, best_of
	opts OpenAIStreamOptions
}

// blk returns the request's block, allocating it on first use.
func (p *reqParser) blk() *reqBlock {
	if p.block == nil {
		p.block = new(reqBlock)
	}
	return p.block
}

// content returns message k's span.
func (p *reqParser) content(k int) span {
	if k < len(p.small) {
		return p.small[k]
	}
	return p.more[k-len(p.small)]
}

// addContent appends a message's span.
func (p *reqParser) addContent(sp span) {
	if p.nmsg < len(p.small) {
		p.small[p.nmsg] = sp
	} else {
		p.more = append(p.more, sp)
	}
	p.nmsg++
}

// parseOpenAIFast decodes body into the zero request r and reports whether
// it could; r is unspecified when it reports false.
func parseOpenAIFast(body []byte, r *OpenAIRequest) bool {
	p := reqParser{b: body}
	b := body
	i := jsonscan.Space(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false // null and type errors are encoding/json's
	}
	i, empty := jsonscan.Enter(b, i)
	for more := !empty; more; {
		key, v, ok := p.key(i)
		if !ok {
			return false
		}
		f := topField(key)
		if f == reqUnsure {
			return false
		}
		if i, ok = p.field(f, r, v); !ok {
			return false
		}
		if i, more, ok = jsonscan.Next(b, i, '}'); !ok {
			return false
		}
	}
	if jsonscan.Space(b, i+1) != len(b) {
		return false
	}
	p.finish(r)
	return true
}

// key reads `"name" :` at b[i] and returns the name's bytes and the index
// of the value. An escaped name is not handled.
func (p *reqParser) key(i int) (key []byte, value int, ok bool) {
	name, escaped, value, ok := jsonscan.Member(p.b, i)
	if !ok || escaped {
		return nil, 0, false
	}
	return name[1 : len(name)-1], value, true
}

// field decodes the value at b[i] into field f and returns the index after
// it.
func (p *reqParser) field(f reqField, r *OpenAIRequest, i int) (int, bool) {
	if f == reqMessages || f == reqStreamOptions {
		// A repeated one decodes into what the first left (slice
		// elements, the pointed-to struct): encoding/json's business.
		if p.seen[f] {
			return 0, false
		}
		p.seen[f] = true
	}
	switch f {
	case reqModel:
		return p.str(i, &r.Model)
	case reqStream:
		return p.bool(i, &r.Stream)
	case reqEcho:
		return p.bool(i, &r.Echo)
	case reqMaxTokens:
		return p.int(i, &r.MaxTokens, 0)
	case reqMaxCompletionTokens:
		return p.int(i, &r.MaxCompletionTokens, 1)
	case reqN:
		return p.int(i, &r.N, 2)
	case reqBestOf:
		return p.int(i, &r.BestOf, 3)
	case reqPrompt:
		return p.raw(i, &p.prompt)
	case reqLogprobs:
		return p.raw(i, &p.logprobs)
	case reqMessages:
		return p.messages(i)
	case reqStreamOptions:
		return p.streamOptions(i, r)
	}
	return jsonscan.Value(p.b, i, skipDepth)
}

// raw records the value at b[i] as sp.
func (p *reqParser) raw(i int, sp *span) (int, bool) {
	end, ok := jsonscan.Value(p.b, i, skipDepth)
	if ok {
		*sp = span{i, end}
	}
	return end, ok
}

// str decodes a string; null leaves dst as it was.
func (p *reqParser) str(i int, dst *string) (int, bool) {
	b := p.b
	if i < len(b) && b[i] == 'n' {
		return jsonscan.Literal(b, i, "null")
	}
	if i >= len(b) || b[i] != '"' {
		return 0, false
	}
	end, escaped, ok := jsonscan.String(b, i)
	if !ok {
		return 0, false
	}
	if s := b[i+1 : end-1]; !escaped && utf8.Valid(s) {
		*dst = string(s)
		return end, true
	}
	// Escapes and invalid UTF-8 (each bad byte becomes U+FFFD): rare
	// enough in a model name to let encoding/json unquote this one string.
	var s string
	if json.Unmarshal(b[i:end], &s) != nil {
		return 0, false
	}
	*dst = s
	return end, true
}

// bool decodes true or false; null leaves dst as it was.
func (p *reqParser) bool(i int, dst *bool) (int, bool) {
	b := p.b
	if i >= len(b) {
		return 0, false
	}
	switch b[i] {
	case 't':
		*dst = true
		return jsonscan.Literal(b, i, "true")
	case 'f':
		*dst = false
		return jsonscan.Literal(b, i, "false")
	case 'n':
		return jsonscan.Literal(b, i, "null")
	}
	return 0, false
}

// int decodes an integer of at most 18 digits (anything longer might not
// fit and is left to encoding/json) into the block's slot; null sets dst
// to nil.
func (p *reqParser) int(i int, dst **int, slot int) (int, bool) {
	b := p.b
	if i < len(b) && b[i] == 'n' {
		*dst = nil
		return jsonscan.Literal(b, i, "null")
	}
	end, ok := jsonscan.Number(b, i)
	if !ok {
		return 0, false
	}
	neg := b[i] == '-'
	j := i
	if neg {
		j++
	}
	if end-j > 18 {
		return 0, false
	}
	v := 0
	for ; j < end; j++ {
		c := b[j]
		if c < '0' || c > '9' {
			return 0, false // a fraction or exponent: an error for an int
		}
		v = v*10 + int(c-'0')
	}
	if neg {
		v = -v
	}
	bl := p.blk()
	bl.ints[slot] = v
	*dst = &bl.ints[slot]
	return end, true
}

// messages decodes null or an array of objects (or nulls, which leave
// their element empty).
func (p *reqParser) messages(i int) (int, bool) {
	b := p.b
	if i < len(b) && b[i] == 'n' {
		return jsonscan.Literal(b, i, "null")
	}
	if i >= len(b) || b[i] != '[' {
		return 0, false
	}
	p.isArray = true
	i, empty := jsonscan.Enter(b, i)
	for more := !empty; more; {
		var content span
		var ok bool
		switch {
		case i < len(b) && b[i] == '{':
			p.cur = span{}
			if i, ok = p.object(i, memberContent); !ok {
				return 0, false
			}
			content = p.cur
		case i < len(b) && b[i] == 'n':
			if i, ok = jsonscan.Literal(b, i, "null"); !ok {
				return 0, false
			}
		default:
			return 0, false
		}
		p.addContent(content)
		if i, more, ok = jsonscan.Next(b, i, ']'); !ok {
			return 0, false
		}
	}
	return i + 1, true
}

// streamOptions decodes null or an object.
func (p *reqParser) streamOptions(i int, r *OpenAIRequest) (int, bool) {
	b := p.b
	if i < len(b) && b[i] == 'n' {
		r.StreamOptions = nil
		return jsonscan.Literal(b, i, "null")
	}
	if i >= len(b) || b[i] != '{' {
		return 0, false
	}
	r.StreamOptions = &p.blk().opts
	return p.object(i, memberIncludeUsage)
}

// member is the one member read from a nested object.
type member uint8

const (
	memberContent      member = iota // a message's content, into cur
	memberIncludeUsage               // stream_options' include_usage
)

// object walks the object at b[i] == '{', decoding each occurrence of the
// member m (up to case) and validating the others.
func (p *reqParser) object(i int, m member) (int, bool) {
	name := "content"
	if m == memberIncludeUsage {
		name = "include_usage"
	}
	b := p.b
	i, empty := jsonscan.Enter(b, i)
	for more := !empty; more; {
		key, v, ok := p.key(i)
		if !ok {
			return 0, false
		}
		switch nestedField(key, name) {
		case 1:
			if m == memberContent {
				i, ok = p.raw(v, &p.cur)
			} else {
				i, ok = p.bool(v, &p.blk().opts.IncludeUsage)
			}
		case 0:
			i, ok = jsonscan.Value(b, v, skipDepth)
		default:
			return 0, false
		}
		if !ok {
			return 0, false
		}
		if i, more, ok = jsonscan.Next(b, i, '}'); !ok {
			return 0, false
		}
	}
	return i + 1, true
}

// finish copies the raw values into one allocation and builds the
// messages.
func (p *reqParser) finish(r *OpenAIRequest) {
	n := p.prompt.to - p.prompt.from + p.logprobs.to - p.logprobs.from
	for k := range p.nmsg {
		c := p.content(k)
		n += c.to - c.from
	}
	buf := make([]byte, 0, n)
	take := func(sp span) json.RawMessage {
		if sp.to == sp.from {
			return nil
		}
		from := len(buf)
		buf = append(buf, p.b[sp.from:sp.to]...)
		return buf[from:len(buf):len(buf)]
	}
	r.Prompt = take(p.prompt)
	r.Logprobs = take(p.logprobs)
	if p.isArray {
		r.Messages = make([]OpenAIMessage, p.nmsg)
		for k := range r.Messages {
			r.Messages[k].Content = take(p.content(k))
		}
	}
}
