package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/llmesh/llmesh/exchange"
	"github.com/llmesh/llmesh/scheduler"
)

// splicer continues a preempted OpenAI SSE stream: it remembers the
// stream's identity from the first attempt, builds the continuation request
// (original prompt + text generated so far, remaining max_tokens) and
// rewrites the continuation's events so that the client sees one stream:
// the first attempt's id and created time, no second role delta, and a
// final usage that counts the original prompt and every generated token.
type splicer struct {
	kind exchange.API
	// id and created are the first attempt's, copied into continuation
	// events.
	id      json.RawMessage
	created json.RawMessage
	// before is how many tokens the client had received when the current
	// continuation started.
	before    int
	rewriting bool
	// sent is the text the client had when the current continuation
	// started; checking: a continuation's events are held (held, their
	// text in got) until verdict tells a continued answer from a restarted
	// one.
	sent     string
	checking bool
	got      string
	held     []byte
}

func newSplicer(kind exchange.API) *splicer { return &splicer{kind: kind} }

// track reads the stream's identity from the first attempt's first event;
// events are whole (the stream cuts at event boundaries).
func (sp *splicer) track(b []byte) {
	if sp.id != nil {
		return
	}
	forEachData(b, func(data []byte) bool {
		var head struct {
			ID      json.RawMessage `json:"id"`
			Created json.RawMessage `json:"created"`
		}
		if json.Unmarshal(data, &head) == nil && head.ID != nil {
			sp.id, sp.created = head.ID, head.Created
			return false
		}
		return true
	})
}

// forEachData calls f with the data of each whole event in b (data lines
// joined by "\n") until f returns false.
func forEachData(b []byte, f func(data []byte) bool) {
	b = crlf(b)
	for len(b) > 0 {
		end := bytes.Index(b, []byte("\n\n"))
		var ev []byte
		if end < 0 {
			ev, b = b, nil
		} else {
			ev, b = b[:end], b[end+2:]
		}
		data := eventData(ev)
		if data != nil && !f(data) {
			return
		}
	}
}

// crlf turns CRLF line ends into LF so that events split on "\n\n";
// engines that write CRLF are rare, so the copy is too.
func crlf(b []byte) []byte {
	if bytes.IndexByte(b, '\r') < 0 {
		return b
	}
	return bytes.ReplaceAll(b, []byte("\r\n"), []byte("\n"))
}

// eventData joins an event's data lines; nil when it has none.
func eventData(ev []byte) []byte {
	var data []byte
	for len(ev) > 0 {
		line := ev
		if i := bytes.IndexByte(ev, '\n'); i >= 0 {
			line, ev = ev[:i], ev[i+1:]
		} else {
			ev = nil
		}
		line = bytes.TrimSuffix(line, []byte("\r"))
		if v, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			v = bytes.TrimPrefix(v, []byte(" "))
			if data != nil {
				data = append(data, '\n')
			}
			data = append(data, v...)
		}
	}
	return data
}

// continuationBody builds the continuation request from the original body.
// ok is false when nothing is left to generate.
func (sp *splicer) continuationBody(orig []byte, text string, generated int) (body []byte, ok bool, err error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(orig, &m); err != nil {
		return nil, false, fmt.Errorf("continuation: request body: %w", err)
	}
	for _, k := range []string{"max_tokens", "max_completion_tokens"} {
		if raw, has := m[k]; has && string(raw) != "null" {
			n, err := strconv.Atoi(string(raw))
			if err != nil {
				return nil, false, fmt.Errorf("continuation: %s: %s is not an integer", k, raw)
			}
			if n-generated <= 0 {
				return nil, false, nil
			}
			m[k] = json.RawMessage(strconv.Itoa(n - generated))
		}
	}
	if raw, has := m["min_tokens"]; has {
		if n, err := strconv.Atoi(string(raw)); err == nil {
			m["min_tokens"] = json.RawMessage(strconv.Itoa(max(0, n-generated)))
		}
	}
	switch sp.kind {
	case exchange.APICompletions:
		var prompt string
		if err := json.Unmarshal(m["prompt"], &prompt); err != nil {
			return nil, false, errors.New("continuation: prompt is not a string")
		}
		m["prompt"], _ = json.Marshal(prompt + text)
	case exchange.APIChat:
		var msgs []json.RawMessage
		if err := json.Unmarshal(m["messages"], &msgs); err != nil {
			return nil, false, errors.New("continuation: messages is not a list")
		}
		partial, _ := json.Marshal(map[string]string{"role": "assistant", "content": text})
		msgs = append(msgs, partial)
		m["messages"], _ = json.Marshal(msgs)
		// vLLM's way to continue a final assistant message instead of
		// starting a new turn.
		m["continue_final_message"] = json.RawMessage("true")
		m["add_generation_prompt"] = json.RawMessage("false")
	default:
		return nil, false, errors.New("continuation: unsupported API")
	}
	body, err = json.Marshal(m)
	return body, err == nil, err
}

// rewrite turns continuation events into events of the client's stream.
// While a continuation is being checked (see verdict) its events are
// held back; err is ErrContinuationRestarted when the check finds that the
// engine started its answer over.
func (sp *splicer) rewrite(b []byte) (out []byte, err error) {
	out = make([]byte, 0, len(b)+64)
	b = crlf(b)
	for len(b) > 0 {
		end := bytes.Index(b, []byte("\n\n"))
		var ev []byte
		if end < 0 {
			ev, b = b, nil
		} else {
			ev, b = b[:end], b[end+2:]
		}
		data := eventData(ev)
		if data == nil || bytes.Equal(data, []byte("[DONE]")) {
			if out, err = sp.pass(out, append(append([]byte(nil), ev...), '\n', '\n'), "", data != nil); err != nil {
				return nil, err
			}
			continue
		}
		nd, text, final, keep := sp.rewriteChunk(data)
		if !keep {
			continue
		}
		e := make([]byte, 0, len(nd)+8)
		e = append(e, "data: "...)
		e = append(e, nd...)
		e = append(e, '\n', '\n')
		if out, err = sp.pass(out, e, text, final); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// checkBytes is how much of the text the client already has a
// continuation's start is compared with.
const checkBytes = 64

// pass appends a rewritten event to out, or holds it while the
// continuation is being checked; text is the event's generated text and
// final says that the continuation's generation is over (a finish reason,
// usage, [DONE]).
func (sp *splicer) pass(out, ev []byte, text string, final bool) ([]byte, error) {
	if !sp.checking {
		return append(out, ev...), nil
	}
	sp.held = append(sp.held, ev...)
	sp.got += text
	switch sp.verdict(final) {
	case verdictRestarted:
		sp.checking, sp.held = false, nil
		return nil, ErrContinuationRestarted
	case verdictContinued:
		out = append(out, sp.held...)
		sp.checking, sp.held = false, nil
	}
	return out, nil
}

type verdict uint8

const (
	verdictPending verdict = iota
	verdictContinued
	verdictRestarted
)

// verdict decides whether a continuation (chat or completions) continued
// the text the client already has (sent) or started the answer over, as a
// chat engine that ignores continue_final_message does, or a completions
// engine that answers the original prompt again. The rule: the continuation
// restarted when its text (leading white space aside) begins with the
// first checkBytes bytes of sent (all of sent when shorter); it continued
// as soon as its text is no longer a prefix of sent. A continuation that
// ends while its whole text is a non-empty prefix of sent counts as a
// restart. An engine that restarts with different text (sampling) is not
// detected: only a repeat is.
func (sp *splicer) verdict(final bool) verdict {
	sent := strings.TrimLeft(sp.sent, " \t\n")
	got := strings.TrimLeft(sp.got, " \t\n")
	need := min(len(sent), checkBytes)
	if len(got) >= need {
		if got[:need] == sent[:need] {
			return verdictRestarted
		}
		return verdictContinued
	}
	if !strings.HasPrefix(sent, got) {
		return verdictContinued
	}
	if !final {
		return verdictPending
	}
	if got != "" {
		return verdictRestarted
	}
	return verdictContinued
}

// settle ends a check when the continuation's body ended: it returns the
// held events, or ErrContinuationRestarted.
func (sp *splicer) settle() ([]byte, error) {
	if !sp.checking {
		return nil, nil
	}
	return sp.pass(nil, nil, "", true)
}

// rewriteChunk fixes one continuation chunk; keep is false for a chat
// role-only delta, which the client already got from the first attempt.
// text is the chunk's generated text (first choice) and final says it
// carries a finish reason or usage.
func (sp *splicer) rewriteChunk(data []byte) (out []byte, text string, final, keep bool) {
	var m map[string]json.RawMessage
	if json.Unmarshal(data, &m) != nil {
		return data, "", false, true
	}
	if sp.kind == exchange.APIChat && roleOnly(m["choices"]) {
		return nil, "", false, false
	}
	text, final = chunkText(m["choices"])
	if sp.id != nil {
		m["id"] = sp.id
	}
	if sp.created != nil {
		m["created"] = sp.created
	}
	if raw, ok := m["usage"]; ok && string(raw) != "null" {
		final = true
		var u map[string]json.RawMessage
		if json.Unmarshal(raw, &u) == nil {
			prompt, _ := strconv.Atoi(string(u["prompt_tokens"]))
			completion, _ := strconv.Atoi(string(u["completion_tokens"]))
			// The continuation's prompt is the original prompt plus the
			// text generated before; its tokens are the original's plus
			// those (the engine's tokenizer round-trips its own output).
			origPrompt := max(0, prompt-sp.before)
			total := completion + sp.before
			u["prompt_tokens"] = json.RawMessage(strconv.Itoa(origPrompt))
			u["completion_tokens"] = json.RawMessage(strconv.Itoa(total))
			u["total_tokens"] = json.RawMessage(strconv.Itoa(origPrompt + total))
			m["usage"], _ = json.Marshal(u)
		}
	}
	out, err := json.Marshal(m)
	if err != nil {
		return data, text, final, true
	}
	return out, text, final, true
}

// chunkText is the first choice's generated text (chat delta content or
// completion text) and whether a choice has a finish reason.
func chunkText(raw json.RawMessage) (text string, finished bool) {
	var choices []struct {
		Text  string `json:"text"`
		Delta struct {
			Content string `json:"content"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	}
	if json.Unmarshal(raw, &choices) != nil || len(choices) == 0 {
		return "", false
	}
	for _, c := range choices {
		if c.FinishReason != nil {
			finished = true
		}
	}
	return choices[0].Text + choices[0].Delta.Content, finished
}

// roleOnly reports whether choices holds only deltas without content and
// without a finish reason.
func roleOnly(raw json.RawMessage) bool {
	var choices []struct {
		Delta struct {
			Content *string `json:"content"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	}
	if json.Unmarshal(raw, &choices) != nil || len(choices) == 0 {
		return false
	}
	for _, c := range choices {
		if (c.Delta.Content != nil && *c.Delta.Content != "") || c.FinishReason != nil {
			return false
		}
	}
	return true
}

// continueStream replaces the ended upstream with a continuation request
// whose events are spliced into the client's stream. The ended attempt's
// lease goes back as how says (exchange.EndPreempted for a preemption,
// exchange.EndFailed for a migration: migrate.go), and the continuation waits
// for a new admission at the front of its class, away from avoid when it
// names an endpoint. A preemption of the continuation before its first byte
// starts over; one during it is handled by end like the first. A
// continuation whose endpoint refuses the connection (nothing sent) is
// admitted once more away from that endpoint, which the refusal ejects.
func (s *stream) continueStream(how exchange.Ending, avoid string) error {
	x := s.x
	sp := s.splice
	ctx := s.outreq.Context()
	s.res.Body.Close()
	s.a.stop()
	redialed := false
	for {
		generated := x.core.View().Progress.Tokens
		body, ok, err := sp.continuationBody(x.body, x.output(), generated)
		if err == nil && (!ok || x.core.View().Observation().FinishReason != "") {
			// Ended after the last token (max_tokens reached, or a
			// finish reason already sent) but before [DONE]: nothing to
			// continue, and the client's stream ends as the engine's would
			// have, so the request completed (its lease goes back as done
			// when it ends, at once). A usage chunk the upstream had not
			// sent yet is lost.
			done := []byte("data: [DONE]\n\n")
			s.pending = append(s.pending, done...)
			_ = x.core.Chunk(s.now(), done)
			s.finishSynthetic()
			return nil
		}
		x.core.Requeued(how)
		if err != nil {
			return err
		}
		if err := x.admitContinuation(ctx, avoid); err != nil {
			return fmt.Errorf("continuation: %w", err)
		}
		sp.before = generated
		sp.rewriting = true
		sp.sent, sp.got, sp.held = x.output(), "", nil
		sp.checking = strings.TrimSpace(sp.sent) != ""
		a := x.newAttempt(ctx)
		res, err := send(s.base, x, a, s.outreq, body)
		if err == nil && res.StatusCode != http.StatusOK {
			res.Body.Close()
			err = fmt.Errorf("continuation: upstream status %d", res.StatusCode)
		}
		if err != nil {
			cause := a.cause()
			a.stop()
			if errors.Is(cause, errPreemptSignal) && ctx.Err() == nil {
				how = exchange.EndPreempted
				continue
			}
			if cause == nil && unreachable(err) && !redialed && ctx.Err() == nil && len(x.pool.endpoints) > 1 {
				redialed = true
				how, avoid = exchange.EndUnreachable, scheduler.EndpointOf(x.core.View().Lease)
				continue
			}
			return fmt.Errorf("%w: continuation: %v", ErrUpstreamReset, err)
		}
		s.a, s.res = a, res
		s.framing = framingSSE
		return nil
	}
}

// finishSynthetic ends a spliced stream that needed no continuation.
func (s *stream) finishSynthetic() {
	s.done = true
	s.doneErr = io.EOF
	s.serverTiming()
}
