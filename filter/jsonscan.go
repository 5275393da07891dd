package filter

import (
	"bytes"
	"time"
	"unicode/utf8"
)

// jsonScanner walks just enough JSON to pull out the fields the observer
// needs, without allocating and without building values. It is lenient
// about what it skips (it checks nesting and string termination, not every
// literal) and strict enough to notice truncated or garbled input.
type jsonScanner struct {
	b   []byte
	i   int
	bad bool
}

func (s *jsonScanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// peek returns the next non-space byte, or 0 at the end.
func (s *jsonScanner) peek() byte {
	s.ws()
	if s.i >= len(s.b) {
		return 0
	}
	return s.b[s.i]
}

// open consumes c ('{' or '[') and reports whether it was there. A null is
// consumed and reported as absent; any other value is skipped.
func (s *jsonScanner) open(c byte) bool {
	switch s.peek() {
	case c:
		s.i++
		return true
	case 0:
		s.bad = true
		return false
	}
	s.skip()
	return false
}

// key returns the next member name of an object opened with open('{') and
// leaves the scanner at its value; ok is false at the closing brace.
func (s *jsonScanner) key() (k []byte, ok bool) {
	if s.bad {
		return nil, false
	}
	c := s.peek()
	if c == ',' {
		s.i++
		c = s.peek()
	}
	if c == '}' {
		s.i++
		return nil, false
	}
	if c != '"' {
		s.bad = true
		return nil, false
	}
	k, _ = s.str()
	if s.peek() != ':' {
		s.bad = true
		return nil, false
	}
	s.i++
	return k, !s.bad
}

// elem reports whether an array opened with open('[') has another element,
// leaving the scanner at it.
func (s *jsonScanner) elem() bool {
	if s.bad {
		return false
	}
	c := s.peek()
	if c == ',' {
		s.i++
		c = s.peek()
	}
	switch c {
	case ']':
		s.i++
		return false
	case 0:
		s.bad = true
		return false
	}
	return true
}

// str consumes a string and returns its raw (still escaped) contents.
func (s *jsonScanner) str() (raw []byte, escaped bool) {
	if s.peek() != '"' {
		s.skip()
		return nil, false
	}
	start := s.i + 1
	// Keys and most values are short: a plain loop beats a vectorised scan
	// there, and it tells escaped strings apart in the same pass.
	head := s.b[start:]
	if len(head) > 32 {
		head = head[:32]
	}
	for j, c := range head {
		if c == '"' {
			s.i = start + j + 1
			return head[:j], false
		}
		if c == '\\' {
			break
		}
	}
	return s.longStr(start)
}

// longStr finds the closing quote of a string starting at start with a
// vectorised scan; a quote preceded by an odd run of backslashes is
// escaped, so it keeps looking past it.
func (s *jsonScanner) longStr(start int) (raw []byte, escaped bool) {
	for j := start; ; {
		q := bytes.IndexByte(s.b[j:], '"')
		if q < 0 {
			s.bad = true
			s.i = len(s.b)
			return nil, false
		}
		end := j + q
		bs := 0
		for k := end - 1; k >= start && s.b[k] == '\\'; k-- {
			bs++
		}
		if bs%2 == 0 {
			s.i = end + 1
			raw = s.b[start:end]
			return raw, bytes.IndexByte(raw, '\\') >= 0
		}
		j = end + 1
	}
}

// int consumes a number and returns its integer part; ok is false for
// anything that is not a number (the value is skipped).
func (s *jsonScanner) int() (v int64, ok bool) {
	c := s.peek()
	if c != '-' && (c < '0' || c > '9') {
		s.skip()
		return 0, false
	}
	neg := c == '-'
	if neg {
		s.i++
	}
	digits := 0
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		if v < (1<<63-1)/10 {
			v = v*10 + int64(s.b[s.i]-'0')
		}
		s.i++
		digits++
	}
	// Fraction and exponent are consumed and ignored: the fields read this
	// way are integer counts and nanosecond stamps.
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case '.', 'e', 'E', '+', '-':
			s.i++
			continue
		}
		if s.b[s.i] >= '0' && s.b[s.i] <= '9' {
			s.i++
			continue
		}
		break
	}
	if digits == 0 {
		s.bad = true
		return 0, false
	}
	if neg {
		v = -v
	}
	return v, true
}

// skip consumes one value of any kind, iteratively (no recursion, so deep
// nesting cannot overflow the stack).
func (s *jsonScanner) skip() {
	depth := 0
	for {
		c := s.peek()
		switch c {
		case 0:
			s.bad = true
			return
		case '"':
			s.str()
		case '{', '[':
			depth++
			s.i++
			continue
		case '}', ']':
			if depth == 0 {
				s.bad = true
				return
			}
			depth--
			s.i++
		case ',', ':':
			if depth == 0 {
				s.bad = true
				return
			}
			s.i++
			continue
		default:
			// A scalar literal: up to the next delimiter.
			start := s.i
			for s.i < len(s.b) {
				switch s.b[s.i] {
				case ',', '}', ']', ' ', '\t', '\n', '\r', ':', '"', '{', '[':
					goto done
				}
				s.i++
			}
		done:
			if s.i == start {
				s.bad = true
				return
			}
		}
		if s.bad || depth == 0 {
			return
		}
	}
}

// chunkResult is what one OpenAI JSON object (an SSE chunk or a whole
// non-streaming body) contributed, plus what the SSE fast path needs to
// know to reuse the object's shape (see chunkTemplate).
type chunkResult struct {
	tokens int
	// texts counts the token-bearing string fields met (choices[].text,
	// delta/message content, reasoning_content, reasoning), empty or not.
	texts int
	// textStart and textEnd bound the contents of the last such string
	// (after its opening quote, at its closing quote); textKept says the
	// observer keeps it as output (choices[0]'s text or content).
	textStart, textEnd int
	textKept           bool
	// effects: the object changed the observation beyond counting a
	// token-bearing chunk (usage, error, finish reason, engine times, tool
	// calls), so its shape must not be replayed.
	effects bool
}

// scanChunk reads an OpenAI completion/chat chunk (or body) and updates the
// observation: token-bearing choices, finish reason, usage, errors, and the
// llmesh_engine ground truth.
func (o *Observer) scanChunk(data []byte, r *chunkResult) error {
	s := jsonScanner{b: data}
	if !s.open('{') {
		return o.malformed("event %d: not a JSON object", o.obs.Chunks)
	}
	isError := false
	var message []byte
	for {
		k, ok := s.key()
		if !ok {
			break
		}
		switch string(k) {
		case "choices":
			o.scanChoices(&s, r)
		case "usage":
			if s.peek() != 'n' { // usage:null changes nothing
				r.effects = true
			}
			o.scanUsage(&s)
		case "error":
			isError = true
			r.effects = true
			if s.peek() == '"' {
				message, _ = s.str()
			} else if s.open('{') {
				for {
					k, ok := s.key()
					if !ok {
						break
					}
					if string(k) == "message" {
						message, _ = s.str()
					} else {
						s.skip()
					}
				}
			}
		case "object":
			v, _ := s.str()
			if string(v) == "error" {
				isError = true
				r.effects = true
			}
		case "message":
			r.effects = true
			if s.peek() == '"' {
				message, _ = s.str()
			} else {
				s.skip()
			}
		case "llmesh_engine":
			if s.peek() != 'n' {
				r.effects = true
			}
			o.scanEngine(&s)
		default:
			s.skip()
		}
	}
	if s.bad {
		return o.malformed("event %d: invalid JSON at byte %d", o.obs.Chunks, s.i)
	}
	if isError {
		msg := "stream error"
		if len(message) > 0 {
			msg = "stream error: " + string(truncate(message, 512))
		}
		if o.obs.ErrorKind == ErrorHTTPStatus {
			// A better message for the status the headers already reported.
			o.obs.Error += ": " + string(truncate(message, 512))
		} else {
			o.SetError(ErrorStreamEvent, msg)
		}
	}
	return nil
}

// scanChoices reads choices[]: text (completions), delta.* (chat stream),
// message.* (chat body), finish_reason.
func (o *Observer) scanChoices(s *jsonScanner, r *chunkResult) {
	if !s.open('[') {
		return
	}
	first := true
	for s.elem() {
		if !s.open('{') {
			continue
		}
		bearing := false
		for {
			k, ok := s.key()
			if !ok {
				break
			}
			switch string(k) {
			case "text":
				if raw, esc := textField(s, r, first); len(raw) > 0 {
					bearing = true
					o.keepText(first, raw, esc)
				}
			case "delta", "message":
				if s.open('{') {
					for {
						k, ok := s.key()
						if !ok {
							break
						}
						switch string(k) {
						case "content", "reasoning_content", "reasoning":
							kept := first && string(k) == "content"
							if raw, esc := textField(s, r, kept); len(raw) > 0 {
								bearing = true
								if string(k) == "content" {
									o.keepText(first, raw, esc)
								}
							}
						case "tool_calls":
							if s.open('[') {
								for s.elem() {
									bearing = true
									r.effects = true
									s.skip()
								}
							}
						default:
							s.skip()
						}
					}
				}
			case "finish_reason":
				if raw, _ := s.str(); len(raw) > 0 {
					r.effects = true
					if string(raw) != o.obs.FinishReason {
						o.obs.FinishReason = string(raw)
					}
				}
			default:
				s.skip()
			}
		}
		if bearing {
			r.tokens++
		}
		first = false
	}
}

// textField reads a token-bearing string field and notes where its
// contents lie in the object, for chunkTemplate.
func textField(s *jsonScanner, r *chunkResult, kept bool) (raw []byte, escaped bool) {
	r.texts++
	isStr := s.peek() == '"'
	start := s.i + 1
	raw, escaped = s.str()
	if isStr && !s.bad {
		r.textStart, r.textEnd, r.textKept = start, s.i-1, kept
	} else {
		r.textStart, r.textEnd = 0, 0
	}
	return raw, escaped
}

func (o *Observer) keepText(first bool, raw []byte, escaped bool) {
	if !o.opts.KeepOutput || !first {
		return
	}
	if !escaped {
		o.text = append(o.text, raw...)
		return
	}
	o.text = appendUnescaped(o.text, raw)
}

func (o *Observer) scanUsage(s *jsonScanner) {
	if !s.open('{') {
		return
	}
	for {
		k, ok := s.key()
		if !ok {
			return
		}
		switch string(k) {
		case "completion_tokens":
			if v, ok := s.int(); ok && v >= 0 {
				o.obs.OutputTokens = int(v)
				o.obs.UsageReported = true
			}
		case "prompt_tokens":
			if v, ok := s.int(); ok && v >= 0 {
				o.obs.PromptTokens = int(v)
			}
		default:
			s.skip()
		}
	}
}

func (o *Observer) scanEngine(s *jsonScanner) {
	if !s.open('{') {
		return
	}
	e := &o.obs.Engine
	for {
		k, ok := s.key()
		if !ok {
			return
		}
		var dst *time.Time
		switch string(k) {
		case "arrival_ns":
			dst = &e.Arrival
		case "first_scheduled_ns":
			dst = &e.FirstScheduled
		case "first_token_ns":
			dst = &e.FirstToken
		case "finish_ns":
			dst = &e.Finish
		case "preemptions":
			if v, ok := s.int(); ok && v >= 0 {
				e.Preemptions = int(v)
				e.Seen = true
			}
			continue
		default:
			s.skip()
			continue
		}
		if v, ok := s.int(); ok && v > 0 {
			*dst = time.Unix(0, v)
			e.Seen = true
		}
	}
}

// appendUnescaped appends the JSON string contents raw, decoded.
func appendUnescaped(dst, raw []byte) []byte {
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
		h, ok := unhex(c)
		if !ok {
			return 0, 0
		}
		r = r<<4 | rune(h)
	}
	return r, 4
}

// observeJSON buffers a non-streaming body (bounded) until Finish.
func (o *Observer) observeJSON(t time.Time, p []byte) error {
	if len(o.body) == 0 {
		o.bodyStart = t
	}
	if len(o.body)+len(p) > o.opts.MaxEventBytes {
		o.body = o.body[:0]
		return o.fail(ErrorEventTooLarge, errBodyTooLarge(o.opts.MaxEventBytes))
	}
	o.body = append(o.body, p...)
	return nil
}

func (o *Observer) finishJSON() {
	o.obs.Chunks++
	var r chunkResult
	if err := o.scanChunk(o.body, &r); err != nil {
		return
	}
	o.obs.Complete = true
	if r.tokens > 0 {
		o.tokenChunk(o.bodyStart, r.tokens)
	}
}
