package exchange

import (
	"time"

	"github.com/llmesh/llmesh/internal/jsonscan"
)

// The observer's reading of OpenAI JSON objects: which fields of a chunk
// (or a whole non-streaming body) it looks at, on jsonscan's lenient cursor.

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
	s := jsonscan.NewLenient(data)
	if !s.Open('{') {
		return o.malformed("event %d: not a JSON object", o.obs.Chunks)
	}
	isError := false
	var message []byte
	for {
		k, ok := s.Key()
		if !ok {
			break
		}
		switch string(k) {
		case "choices":
			o.scanChoices(&s, r)
		case "usage":
			if s.Peek() != 'n' { // usage:null changes nothing
				r.effects = true
			}
			o.scanUsage(&s)
		case "error":
			isError = true
			r.effects = true
			if s.Peek() == '"' {
				message, _ = s.Str()
			} else if s.Open('{') {
				for {
					k, ok := s.Key()
					if !ok {
						break
					}
					if string(k) == "message" {
						message, _ = s.Str()
					} else {
						s.Skip()
					}
				}
			}
		case "object":
			v, _ := s.Str()
			if string(v) == "error" {
				isError = true
				r.effects = true
			}
		case "message":
			r.effects = true
			if s.Peek() == '"' {
				message, _ = s.Str()
			} else {
				s.Skip()
			}
		case "llmesh_engine":
			if s.Peek() != 'n' {
				r.effects = true
			}
			o.scanEngine(&s)
		default:
			s.Skip()
		}
	}
	if s.Bad() {
		return o.malformed("event %d: invalid JSON at byte %d", o.obs.Chunks, s.Pos())
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
func (o *Observer) scanChoices(s *jsonscan.Lenient, r *chunkResult) {
	if !s.Open('[') {
		return
	}
	first := true
	for s.Elem() {
		if !s.Open('{') {
			continue
		}
		bearing := false
		for {
			k, ok := s.Key()
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
				if s.Open('{') {
					for {
						k, ok := s.Key()
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
							if s.Open('[') {
								for s.Elem() {
									bearing = true
									r.effects = true
									s.Skip()
								}
							}
						default:
							s.Skip()
						}
					}
				}
			case "finish_reason":
				if raw, _ := s.Str(); len(raw) > 0 {
					r.effects = true
					if string(raw) != o.obs.FinishReason {
						o.obs.FinishReason = string(raw)
					}
				}
			default:
				s.Skip()
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
func textField(s *jsonscan.Lenient, r *chunkResult, kept bool) (raw []byte, escaped bool) {
	r.texts++
	isStr := s.Peek() == '"'
	start := s.Pos() + 1
	raw, escaped = s.Str()
	if isStr && !s.Bad() {
		r.textStart, r.textEnd, r.textKept = start, s.Pos()-1, kept
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
	o.text = jsonscan.AppendUnescaped(o.text, raw)
}

func (o *Observer) scanUsage(s *jsonscan.Lenient) {
	if !s.Open('{') {
		return
	}
	for {
		k, ok := s.Key()
		if !ok {
			return
		}
		switch string(k) {
		case "completion_tokens":
			if v, ok := s.Int(); ok && v >= 0 {
				o.obs.OutputTokens = int(v)
				o.obs.UsageReported = true
			}
		case "prompt_tokens":
			if v, ok := s.Int(); ok && v >= 0 {
				o.obs.PromptTokens = int(v)
			}
		default:
			s.Skip()
		}
	}
}

func (o *Observer) scanEngine(s *jsonscan.Lenient) {
	if !s.Open('{') {
		return
	}
	e := &o.obs.Engine
	for {
		k, ok := s.Key()
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
			if v, ok := s.Int(); ok && v >= 0 {
				e.Preemptions = int(v)
				e.Seen = true
			}
			continue
		default:
			s.Skip()
			continue
		}
		if v, ok := s.Int(); ok && v > 0 {
			*dst = time.Unix(0, v)
			e.Seen = true
		}
	}
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
