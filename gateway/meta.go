package gateway

import (
	"encoding/binary"
	"encoding/json"
	"strings"

	"github.com/llmesh/llmesh/api/llmv1"
	"github.com/llmesh/llmesh/api/vllmpb"
	"google.golang.org/protobuf/proto"
)

// apiKind is the request API as far as continuation cares.
type apiKind uint8

const (
	apiOther apiKind = iota
	apiCompletions
	apiChat
)

// requestMeta is what the gateway reads from a request body: sizing for the
// scheduler, and what a continuation request needs.
type requestMeta struct {
	kind         apiKind
	model        string
	stream       bool
	maxTokens    int
	promptTokens int
	// spliceable: a mid-stream preemption can be continued (SSE completions
	// or chat with one choice and a plain string prompt / messages).
	spliceable bool
	// includeUsage: the client asked for the final usage chunk.
	includeUsage bool
}

// openAIRequest holds the fields of an OpenAI request the gateway reads.
type openAIRequest struct {
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

// charsPerToken sizes prompts whose token count the gateway cannot know
// without the model's tokenizer; the scheduler only needs an estimate.
const charsPerToken = 4

func parseRequestMeta(path string, body []byte, grpcReq bool) requestMeta {
	if grpcReq {
		return parseGRPCMeta(path, body)
	}
	var m requestMeta
	switch {
	case strings.HasSuffix(path, "/chat/completions"):
		m.kind = apiChat
	case strings.HasSuffix(path, "/completions"):
		m.kind = apiCompletions
	default:
		return m
	}
	var req openAIRequest
	if json.Unmarshal(body, &req) != nil {
		m.kind = apiOther
		return m
	}
	m.model = req.Model
	m.stream = req.Stream
	if req.MaxTokens != nil {
		m.maxTokens = *req.MaxTokens
	} else if req.MaxCompletionTokens != nil {
		m.maxTokens = *req.MaxCompletionTokens
	}
	m.includeUsage = req.StreamOptions != nil && req.StreamOptions.IncludeUsage
	chars := len(req.Prompt)
	for _, msg := range req.Messages {
		chars += len(msg.Content)
	}
	m.promptTokens = (chars + charsPerToken - 1) / charsPerToken
	single := (req.N == nil || *req.N == 1) && (req.BestOf == nil || *req.BestOf <= 1)
	plain := !req.Echo && (len(req.Logprobs) == 0 || string(req.Logprobs) == "null" || string(req.Logprobs) == "false")
	switch m.kind {
	case apiCompletions:
		m.spliceable = m.stream && single && plain && len(req.Prompt) > 0 && req.Prompt[0] == '"'
	case apiChat:
		m.spliceable = m.stream && single && plain && len(req.Messages) > 0
	}
	return m
}

// parseGRPCMeta sizes llm.v1 and vLLM engine requests. Compressed or
// unknown messages are left unsized.
func parseGRPCMeta(path string, body []byte) requestMeta {
	var m requestMeta
	if len(body) < 5 || body[0] != 0 {
		return m
	}
	n := binary.BigEndian.Uint32(body[1:5])
	if uint64(n) != uint64(len(body)-5) {
		return m
	}
	msg := body[5:]
	switch path {
	case llmv1.Generation_Generate_FullMethodName:
		var req llmv1.GenerateRequest
		if proto.Unmarshal(msg, &req) != nil {
			return m
		}
		m.model = req.GetModel()
		m.maxTokens = int(req.GetMaxTokens())
		if p := req.GetPrompt(); p != "" {
			m.promptTokens = (len(p) + charsPerToken - 1) / charsPerToken
		} else {
			m.promptTokens = len(req.GetPromptTokenIds())
		}
	case vllmpb.VllmEngine_Generate_FullMethodName:
		var req vllmpb.GenerateRequest
		if proto.Unmarshal(msg, &req) != nil {
			return m
		}
		m.maxTokens = int(req.GetSamplingParams().GetMaxTokens())
		if t := req.GetText(); t != "" {
			m.promptTokens = (len(t) + charsPerToken - 1) / charsPerToken
		} else {
			m.promptTokens = len(req.GetTokenized().GetInputIds())
		}
	}
	m.stream = true
	return m
}
