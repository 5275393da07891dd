package filter

import "encoding/json"

// OpenAIRequest holds the fields of an OpenAI completions or chat request
// that the hosts read before admission: what the scheduler needs (model,
// size) and what decides whether a preempted stream can be continued. Both
// hosts decode a buffered body into it once.
type OpenAIRequest struct {
	Model               string          `json:"model"`
	Stream              bool            `json:"stream"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Prompt              json.RawMessage `json:"prompt"`
	Messages            []struct {
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	N             *int            `json:"n"`
	BestOf        *int            `json:"best_of"`
	Echo          bool            `json:"echo"`
	Logprobs      json.RawMessage `json:"logprobs"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

// BytesPerToken sizes prompts whose token count a host cannot know without
// the model's tokenizer; the scheduler only needs an estimate.
const BytesPerToken = 4

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
// and of the messages' contents, BytesPerToken to a token, rounded up.
func (r *OpenAIRequest) PromptTokens() int {
	n := len(r.Prompt)
	for _, m := range r.Messages {
		n += len(m.Content)
	}
	return EstimateTokens(n)
}

// EstimateTokens is the token estimate for n bytes of text: BytesPerToken
// to a token, rounded up.
func EstimateTokens(n int) int {
	return (n + BytesPerToken - 1) / BytesPerToken
}
