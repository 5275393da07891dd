package exchange

import (
	"encoding/json"
	"fmt"
)

// OpenAIRequest holds the fields of an OpenAI completions or chat request
// that the hosts read before admission: what the scheduler needs (model,
// size) and what decides whether a preempted stream can be continued. Both
// hosts decode a buffered body into it once, with ParseOpenAIRequest.
type OpenAIRequest struct {
	Model               string          `json:"model"`
	Stream              bool            `json:"stream"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Prompt              json.RawMessage `json:"prompt"`
	Messages            []OpenAIMessage `json:"messages"`
	N                   *int            `json:"n"`
	BestOf              *int            `json:"best_of"`
	Echo                bool            `json:"echo"`
	Logprobs            json.RawMessage `json:"logprobs"`
	// StreamOptions is nil when the request has none (or null).
	StreamOptions *OpenAIStreamOptions `json:"stream_options"`
}

// OpenAIMessage is one element of a chat request's messages: only its
// content is read, as sent (a string or an array of parts), for sizing.
type OpenAIMessage struct {
	Content json.RawMessage `json:"content"`
}

// OpenAIStreamOptions is a request's stream_options.
type OpenAIStreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// ParseOpenAIRequest decodes an OpenAI request body. The result and whether
// it fails are exactly those of json.Unmarshal into a zero OpenAIRequest
// (FuzzParseOpenAIRequest holds the two together), and an error wraps
// encoding/json's, which names the field or the byte offset. The common
// shape of a request is decoded in one validating pass without reflection,
// several times cheaper than encoding/json's walk
// (BenchmarkParseOpenAIRequest), which every request paid before admission.
// What that pass does not reproduce is left to encoding/json, so that the
// corners are encoding/json's own: an escaped or non-ASCII member name in
// the request, a message or stream_options, a value of a type its field
// cannot hold, a number that is not an integer of at most 18 digits, a
// repeated messages or stream_options (decoded into what the first left), a
// top level that is not an object, nesting deeper than 1000 levels, and
// invalid JSON. Member names that differ from a field's only in ASCII case
// are matched as encoding/json matches them. The raw messages are copies:
// the request keeps no reference to body.
func ParseOpenAIRequest(body []byte) (OpenAIRequest, error) {
	var r OpenAIRequest
	if parseOpenAIFast(body, &r) {
		return r, nil
	}
	// A fresh value: the fast path may have set fields before it gave up.
	var slow OpenAIRequest
	if err := json.Unmarshal(body, &slow); err != nil {
		return slow, fmt.Errorf("OpenAI request body: %w", err)
	}
	return slow, nil
}

// bytesPerToken sizes prompts whose token count a host cannot know without
// the model's tokenizer; the scheduler only needs an estimate.
const bytesPerToken = 4

// OutputLimit is max_tokens, else max_completion_tokens, else 0 (as sent:
// it may be negative).
func (r *OpenAIRequest) OutputLimit() int {
	switch {
	case r.MaxTokens != nil:
		return *r.MaxTokens
	case r.MaxCompletionTokens != nil:
		return *r.MaxCompletionTokens
	}
	return 0
}

// PromptTokens estimates the prompt's tokens from the bytes of the prompt
// and of the messages' contents, bytesPerToken to a token, rounded up.
func (r *OpenAIRequest) PromptTokens() int {
	n := len(r.Prompt)
	for _, m := range r.Messages {
		n += len(m.Content)
	}
	return estimateTokens(n)
}

// estimateTokens is the token estimate for n bytes of text: bytesPerToken
// to a token, rounded up.
func estimateTokens(n int) int {
	return (n + bytesPerToken - 1) / bytesPerToken
}
