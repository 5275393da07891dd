package server

import (
	"strconv"

	"github.com/llmesh/llmesh/internal/jsonenc"
)

// sseEncoder writes one streamed response's SSE events by appending bytes
// to one reused buffer. A map marshalled per chunk cost more CPU than the
// engine step that made the tokens: at thousands of streams per second on
// two cores the sim's JSON encoding, not its engine model, was what a
// benchmark of the harness against it measured. The bytes are the ones
// encoding/json writes for the same objects, field order aside
// (TestSSEEncoderMatchesJSON holds it to that).
type sseEncoder struct {
	chat bool
	head []byte // `{"id":…,"object":…,"created":…,"model":…,"choices":`
	buf  []byte
}

func newSSEEncoder(o *openAIOut) *sseEncoder {
	e := &sseEncoder{chat: o.req.chat, buf: make([]byte, 0, 512)}
	h := append(make([]byte, 0, 128), `{"id":`...)
	h = jsonenc.AppendString(h, o.id)
	h = append(h, `,"object":`...)
	h = jsonenc.AppendString(h, o.object(true))
	h = append(h, `,"created":`...)
	h = strconv.AppendInt(h, o.created, 10)
	h = append(h, `,"model":`...)
	h = jsonenc.AppendString(h, o.s.cfg.ServedModelName)
	e.head = append(h, `,"choices":`...)
	return e
}

// reset empties the buffer for the next write.
func (e *sseEncoder) reset() { e.buf = e.buf[:0] }

// chunk appends one choice-carrying event: text (with the assistant role
// for a chat stream's first event), finish reason "length" when last, and
// the engine's ground truth when truth is not nil.
func (e *sseEncoder) chunk(text string, role, last bool, truth *engineTruth) {
	b := append(e.buf, "data: "...)
	b = append(b, e.head...)
	b = append(b, `[{"index":0,`...)
	if e.chat {
		b = append(b, `"delta":{"content":`...)
		b = jsonenc.AppendString(b, text)
		if role {
			b = append(b, `,"role":"assistant"`...)
		}
		b = append(b, '}')
	} else {
		b = append(b, `"text":`...)
		b = jsonenc.AppendString(b, text)
	}
	b = append(b, `,"logprobs":null,"finish_reason":`...)
	if last {
		b = append(b, `"length"`...)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, "}]"...)
	if truth != nil {
		b = appendTruth(b, truth)
	}
	e.buf = append(b, "}\n\n"...)
}

// roleOnly appends a chat event whose delta names the role and has no
// content field (the role-chunk-first quirk).
func (e *sseEncoder) roleOnly() {
	b := append(e.buf, "data: "...)
	b = append(b, e.head...)
	b = append(b, `[{"index":0,"delta":{"role":"assistant"},"logprobs":null,"finish_reason":null}]`...)
	e.buf = append(b, "}\n\n"...)
}

// usage appends the include_usage event (no choices).
func (e *sseEncoder) usage(u usage, truth *engineTruth) {
	b := append(e.buf, "data: "...)
	b = append(b, e.head...)
	b = append(b, `[],"usage":{"prompt_tokens":`...)
	b = strconv.AppendInt(b, int64(u.PromptTokens), 10)
	b = append(b, `,"completion_tokens":`...)
	b = strconv.AppendInt(b, int64(u.CompletionTokens), 10)
	b = append(b, `,"total_tokens":`...)
	b = strconv.AppendInt(b, int64(u.TotalTokens), 10)
	b = append(b, '}')
	if truth != nil {
		b = appendTruth(b, truth)
	}
	e.buf = append(b, "}\n\n"...)
}

// done appends the terminating event.
func (e *sseEncoder) done() { e.buf = append(e.buf, "data: [DONE]\n\n"...) }

func appendTruth(b []byte, t *engineTruth) []byte {
	b = append(b, `,"llmesh_engine":{"arrival_ns":`...)
	b = strconv.AppendInt(b, t.ArrivalNs, 10)
	b = append(b, `,"first_scheduled_ns":`...)
	b = strconv.AppendInt(b, t.FirstScheduledNs, 10)
	b = append(b, `,"first_token_ns":`...)
	b = strconv.AppendInt(b, t.FirstTokenNs, 10)
	b = append(b, `,"finish_ns":`...)
	b = strconv.AppendInt(b, t.FinishNs, 10)
	b = append(b, `,"preemptions":`...)
	b = strconv.AppendInt(b, int64(t.Preemptions), 10)
	return append(b, '}')
}
