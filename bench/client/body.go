package client

import (
	"strconv"

	"github.com/llmesh/llmesh/internal/jsonenc"
	"github.com/llmesh/llmesh/sim"
)

// appendBody appends the JSON body of an OpenAI request to b. It writes
// the bytes directly: marshalling a map per request (sorted keys,
// reflection, a copy of the prompt) was a visible share of the harness's
// CPU per request at thousands of requests per second.
// TestAppendBodyMatchesJSON holds it to the map it replaces.
func appendBody(b []byte, req *Request, chat bool) []byte {
	// An empty model is left out: the server then uses the one it serves
	// (vLLM, the sim), rather than looking up a model called "".
	b = append(b, '{')
	if req.Model != "" {
		b = append(b, `"model":`...)
		b = jsonenc.AppendString(b, req.Model)
		b = append(b, ',')
	}
	b = append(b, `"max_tokens":`...)
	b = strconv.AppendInt(b, int64(req.MaxTokens), 10)
	b = append(b, `,"ignore_eos":true,"stream":`...)
	b = strconv.AppendBool(b, req.Stream)
	if req.Stream {
		b = append(b, `,"stream_options":{"include_usage":true}`...)
	}
	if req.SendPriority {
		b = append(b, `,"priority":`...)
		b = strconv.AppendInt(b, int64(req.Priority), 10)
	}
	if chat {
		b = append(b, `,"messages":[{"role":"user","content":`...)
	} else {
		b = append(b, `,"prompt":`...)
	}
	if req.Segments != nil {
		// Vocabulary words are letters only: no escaping.
		b = append(b, '"')
		b = append(b, sim.Detokenize(req.promptIDs())...)
		b = append(b, '"')
	} else {
		b = appendPrompt(b, req.seed(), req.PromptTokens)
	}
	if chat {
		b = append(b, "}]"...)
	}
	return append(b, '}')
}

// appendPrompt appends Prompt(seed, n) as a JSON string; its words need no
// escaping.
func appendPrompt(b []byte, seed, n int) []byte {
	b = append(b, '"')
	if n > 0 {
		b = append(b, 'r')
		b = strconv.AppendInt(b, int64(seed), 10)
		for i := 1; i < n; i++ {
			b = append(b, ' ')
			b = append(b, words[(i*7+seed)&15]...)
		}
	}
	return append(b, '"')
}
