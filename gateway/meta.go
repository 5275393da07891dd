package gateway

import (
	"encoding/binary"
	"strings"

	"github.com/llmesh/llmesh/api/llmv1"
	"github.com/llmesh/llmesh/api/vllmpb"
	"github.com/llmesh/llmesh/filter"
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
	req, err := filter.ParseOpenAIRequest(body)
	if err != nil {
		m.kind = apiOther
		return m
	}
	m.model = req.Model
	m.stream = req.Stream
	m.maxTokens = req.OutputLimit()
	m.includeUsage = req.StreamOptions != nil && req.StreamOptions.IncludeUsage
	m.promptTokens = req.PromptTokens()
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
			m.promptTokens = filter.EstimateTokens(len(p))
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
			m.promptTokens = filter.EstimateTokens(len(t))
		} else {
			m.promptTokens = len(req.GetTokenized().GetInputIds())
		}
	}
	m.stream = true
	return m
}
