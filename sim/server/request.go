package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"

	"github.com/llmesh/llmesh/sim"
)

// Request parsing for the OpenAI-compatible endpoints. Parsers take the
// raw body and return a validated request or a *requestError naming the
// parameter; they never panic (see the fuzz tests).

// maxBodyBytes caps a request body.
const maxBodyBytes = 16 << 20

// openAIParams are the fields both endpoints share.
type openAIParams struct {
	Model               string          `json:"model"`
	MaxTokens           *int64          `json:"max_tokens"`
	MaxCompletionTokens *int64          `json:"max_completion_tokens"`
	Stream              bool            `json:"stream"`
	StreamOptions       *streamOptions  `json:"stream_options"`
	Priority            *int64          `json:"priority"`
	Seed                *int64          `json:"seed"`
	N                   *int64          `json:"n"`
	Prompt              json.RawMessage `json:"prompt"`
	Messages            json.RawMessage `json:"messages"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// apiRequest is a parsed OpenAI request.
type apiRequest struct {
	chat         bool
	model        string
	prompt       []uint32
	maxTokens    int // 0: the server's default
	stream       bool
	includeUsage bool
	priority     int
	seed         *uint64
}

// parseCompletion parses a /v1/completions body.
func parseCompletion(body []byte) (*apiRequest, error) {
	p, err := decodeParams(body)
	if err != nil {
		return nil, err
	}
	r, err := p.common(false)
	if err != nil {
		return nil, err
	}
	if len(p.Prompt) == 0 || string(p.Prompt) == "null" {
		return nil, badRequest("prompt", "prompt is required")
	}
	r.prompt, err = parsePrompt(p.Prompt)
	if err != nil {
		return nil, err
	}
	return r, nil
}

// parseChat parses a /v1/chat/completions body.
func parseChat(body []byte) (*apiRequest, error) { return parseChatTurn(body, false) }

// parseChatTurn parses a chat body. restartTurn drops a final assistant
// message from the context (QuirkNoContinueFinalMessage): the answer then
// starts over instead of continuing that message.
func parseChatTurn(body []byte, restartTurn bool) (*apiRequest, error) {
	p, err := decodeParams(body)
	if err != nil {
		return nil, err
	}
	r, err := p.common(true)
	if err != nil {
		return nil, err
	}
	if len(p.Messages) == 0 || string(p.Messages) == "null" {
		return nil, badRequest("messages", "messages is required")
	}
	var msgs []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(p.Messages, &msgs); err != nil {
		return nil, badRequest("messages", "messages must be an array of {role, content} objects: %v", err)
	}
	if len(msgs) == 0 {
		return nil, badRequest("messages", "messages must not be empty")
	}
	for i, m := range msgs {
		if m.Role == "" {
			return nil, badRequest(fmt.Sprintf("messages[%d].role", i), "messages[%d].role is required", i)
		}
		if restartTurn && i > 0 && i == len(msgs)-1 && m.Role == "assistant" {
			break
		}
		c := bytes.TrimSpace(m.Content)
		switch {
		case len(c) == 0 || string(c) == "null":
		case c[0] == '"':
			var s string
			if err := json.Unmarshal(c, &s); err != nil {
				return nil, badRequest(fmt.Sprintf("messages[%d].content", i), "messages[%d].content: %v", i, err)
			}
			r.prompt = sim.AppendTokens(r.prompt, s)
		case c[0] == '[':
			var parts []struct {
				Type string `json:"type"`
				Text string `json:"text"`
			}
			if err := json.Unmarshal(c, &parts); err != nil {
				return nil, badRequest(fmt.Sprintf("messages[%d].content", i), "messages[%d].content: %v", i, err)
			}
			for j, part := range parts {
				if part.Type != "text" {
					return nil, badRequest(fmt.Sprintf("messages[%d].content[%d].type", i, j), "messages[%d].content[%d].type %q is not supported (only text)", i, j, part.Type)
				}
				r.prompt = sim.AppendTokens(r.prompt, part.Text)
			}
		default:
			return nil, badRequest(fmt.Sprintf("messages[%d].content", i), "messages[%d].content must be a string or an array of text parts", i)
		}
	}
	if len(r.prompt) == 0 {
		return nil, badRequest("messages", "messages contain no text")
	}
	return r, nil
}

func decodeParams(body []byte) (*openAIParams, error) {
	if len(body) > maxBodyBytes {
		return nil, badRequest("", "request body larger than %d bytes", maxBodyBytes)
	}
	var p openAIParams
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&p); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return nil, badRequest(te.Field, "%s: expected %s, got JSON %s", te.Field, te.Type, te.Value)
		}
		return nil, badRequest("", "malformed JSON body: %v", err)
	}
	if dec.More() {
		return nil, badRequest("", "malformed JSON body: data after the top-level object")
	}
	return &p, nil
}

func (p *openAIParams) common(chat bool) (*apiRequest, error) {
	r := &apiRequest{chat: chat, model: p.Model, stream: p.Stream}
	if p.StreamOptions != nil {
		if !p.Stream {
			return nil, badRequest("stream_options", "stream_options is only allowed when stream is true")
		}
		r.includeUsage = p.StreamOptions.IncludeUsage
	}
	mt := p.MaxTokens
	if chat && p.MaxCompletionTokens != nil {
		mt = p.MaxCompletionTokens
	}
	if mt != nil {
		if *mt < 1 || *mt > math.MaxInt32 {
			return nil, badRequest("max_tokens", "max_tokens must be at least 1, got %d.", *mt)
		}
		r.maxTokens = int(*mt)
	}
	if p.N != nil && *p.N != 1 {
		return nil, badRequest("n", "n must be 1, got %d (the simulated engine makes one choice)", *p.N)
	}
	if p.Priority != nil {
		if *p.Priority < math.MinInt32 || *p.Priority > math.MaxInt32 {
			return nil, badRequest("priority", "priority %d out of the int32 range", *p.Priority)
		}
		r.priority = int(*p.Priority)
	}
	if p.Seed != nil {
		s := uint64(*p.Seed)
		r.seed = &s
	}
	return r, nil
}

// parsePrompt accepts a string, token ids, or a one-element array of either.
func parsePrompt(raw json.RawMessage) ([]uint32, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return nil, badRequest("prompt", "prompt is required")
	}
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, badRequest("prompt", "prompt: %v", err)
		}
		ids := sim.Tokenize(s)
		if len(ids) == 0 {
			return nil, badRequest("prompt", "prompt must contain at least one token")
		}
		return ids, nil
	case '[':
	default:
		return nil, badRequest("prompt", "prompt must be a string, an array of token ids, or a one-element array of those")
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, badRequest("prompt", "prompt: %v", err)
	}
	if len(items) == 0 {
		return nil, badRequest("prompt", "prompt must not be empty")
	}
	first := bytes.TrimSpace(items[0])
	if len(first) > 0 && (first[0] == '"' || first[0] == '[') {
		if len(items) > 1 {
			return nil, badRequest("prompt", "batched prompts (%d) are not supported; send one prompt per request", len(items))
		}
		return parsePrompt(first)
	}
	ids := make([]uint32, 0, len(items))
	for i, it := range items {
		var v int64
		if err := json.Unmarshal(it, &v); err != nil {
			return nil, badRequest("prompt", "prompt[%d]: token ids must be integers", i)
		}
		if v < 0 || v >= sim.VocabSize {
			return nil, badRequest("prompt", "prompt[%d]: token id %d out of the vocabulary [0, %d)", i, v, sim.VocabSize)
		}
		ids = append(ids, uint32(v))
	}
	return ids, nil
}
