package exchange

import (
	"encoding/binary"
	"math"
	"strconv"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/llmesh/llmesh/kvblock"
)

// API is a request's API as far as sizing and continuation care.
type API uint8

const (
	APIOther API = iota
	APICompletions
	APIChat
)

// RequestMeta is what the core reads from a generation's request body:
// the model, the sizes the scheduler needs, and what a continuation needs.
// Both hosts read it the same way (ReadRequestMeta).
type RequestMeta struct {
	API   API
	Model string
	// Stream: the client asked for a streamed answer (gRPC: always).
	Stream bool
	// MaxTokens is the output limit the request names, 0 when none; never
	// negative.
	MaxTokens int
	// PromptTokens is an estimate (bytesPerToken a token) or, for token-id
	// prompts, the count.
	PromptTokens int
	// Spliceable: a mid-stream preemption can be continued (SSE completions
	// or chat with one choice and a plain string prompt / messages).
	Spliceable bool
	// IncludeUsage: the client asked for the final usage chunk.
	IncludeUsage bool
	// Invalid, when not empty, names a field no engine can honour and
	// why ("max_tokens: 4294967297 exceeds 2147483647"): hosts refuse the
	// request as a bad request (Exchange.Size) instead of letting the
	// scheduler reject it as if capacity were short. MaxTokens is 0 then.
	Invalid string
	// Blocks name the prompt's leading blocks for prefix-aware endpoint
	// picking (scheduler.Request.Blocks), when asked for
	// (RequestHead.HashPrefix): kvblock hashes of prefixBlockTokens token
	// ids for a prompt of token ids, kvblock.TextChain hashes of
	// prefixBlockBytes bytes for text (prefixhash.go); at most
	// scheduler.MaxBlocks.
	Blocks []kvblock.Hash
}

// MaxOutputTokens is the largest output limit a request may name: vLLM
// and the engine APIs hold max_tokens in 32 bits, and the scheduler's
// token accounting refuses larger counts.
const MaxOutputTokens = math.MaxInt32

// checkOutputLimit sets m.MaxTokens to v, or names field in m.Invalid when
// v is beyond MaxOutputTokens.
func (m *RequestMeta) checkOutputLimit(field string, v int) {
	if v > MaxOutputTokens {
		m.Invalid = field + ": " + strconv.Itoa(v) + " exceeds " + strconv.Itoa(MaxOutputTokens)
		m.MaxTokens = 0
		return
	}
	m.MaxTokens = max(0, v)
}

// ReadRequestMeta reads the request body of an OpenAI-style JSON call (its
// API by path) or a gRPC call (MethodLLMV1, MethodVLLM). A body it cannot read, a compressed
// gRPC message or another method leaves the meta unsized (its zero value,
// Stream set for gRPC methods it knows).
func ReadRequestMeta(path string, body []byte, grpc bool) RequestMeta {
	return readRequestMeta(path, body, grpc, false)
}

// readRequestMeta is ReadRequestMeta, with the prompt's Blocks when hash.
func readRequestMeta(path string, body []byte, grpc, hash bool) RequestMeta {
	if grpc {
		m, prompt, ids := readGRPCMeta(path, body, hash)
		if hash {
			m.Blocks = hashGRPCPrompt(prompt, ids)
		}
		return m
	}
	var m RequestMeta
	switch {
	case strings.HasSuffix(path, "/chat/completions"):
		m.API = APIChat
	case strings.HasSuffix(path, "/completions"):
		m.API = APICompletions
	}
	// Other paths (a route's own generation paths) are read too: the model
	// and sizes matter there as well; only continuation needs the API.
	req, err := ParseOpenAIRequest(body)
	if err != nil {
		return RequestMeta{}
	}
	m.Model = req.Model
	m.Stream = req.Stream
	switch {
	case req.MaxTokens != nil:
		m.checkOutputLimit("max_tokens", *req.MaxTokens)
	case req.MaxCompletionTokens != nil:
		m.checkOutputLimit("max_completion_tokens", *req.MaxCompletionTokens)
	}
	if req.MaxTokens != nil && req.MaxCompletionTokens != nil && m.Invalid == "" {
		// An engine that reads the other one would get it unchecked.
		var other RequestMeta
		other.checkOutputLimit("max_completion_tokens", *req.MaxCompletionTokens)
		if other.Invalid != "" {
			m.Invalid, m.MaxTokens = other.Invalid, 0
		}
	}
	m.IncludeUsage = req.StreamOptions != nil && req.StreamOptions.IncludeUsage
	m.PromptTokens = req.PromptTokens()
	if hash {
		m.Blocks = hashOpenAIPrompt(&req)
	}
	single := (req.N == nil || *req.N == 1) && (req.BestOf == nil || *req.BestOf <= 1)
	plain := !req.Echo && (len(req.Logprobs) == 0 || string(req.Logprobs) == "null" || string(req.Logprobs) == "false")
	switch m.API {
	case APICompletions:
		m.Spliceable = m.Stream && single && plain && len(req.Prompt) > 0 && req.Prompt[0] == '"'
	case APIChat:
		m.Spliceable = m.Stream && single && plain && len(req.Messages) > 0
	}
	return m
}

// Field numbers of the requests read here (api/proto/llm/v1,
// api/proto/vllm/grpc/engine); a test checks them against the generated
// messages.
const (
	llmv1Prompt    = protowire.Number(2)
	llmv1TokenIDs  = protowire.Number(3)
	llmv1MaxTokens = protowire.Number(4)

	vllmTokenized      = protowire.Number(2) // TokenizedInput
	vllmText           = protowire.Number(3)
	vllmSampling       = protowire.Number(4) // SamplingParams
	vllmInputIDs       = protowire.Number(2) // in TokenizedInput
	vllmSamplingTokens = protowire.Number(8) // max_tokens in SamplingParams
)

// readGRPCMeta sizes an uncompressed first message of llm.v1 or vLLM's
// engine API; it also returns the prompt's text and, with keepIDs, its
// token-id fields' values (each a packed run of varints), for hashing.
func readGRPCMeta(path string, body []byte, keepIDs bool) (m RequestMeta, text []byte, ids [][]byte) {
	if path != MethodLLMV1 && path != MethodVLLM {
		return m, nil, nil
	}
	if len(body) < 5 || body[0] != 0 {
		return m, nil, nil
	}
	n := binary.BigEndian.Uint32(body[1:5])
	if uint64(n) != uint64(len(body)-5) {
		return m, nil, nil
	}
	msg := body[5:]
	if path == MethodLLMV1 {
		var prompt []byte
		nids := 0
		var idRuns [][]byte
		ok := fields(msg, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) bool {
			switch {
			case num == llmv1ModelField && typ == protowire.BytesType:
				m.Model = string(v)
			case num == llmv1Prompt && typ == protowire.BytesType:
				prompt = v
			case num == llmv1TokenIDs && typ == protowire.BytesType: // packed
				c, ok := varints(v)
				nids += c
				if keepIDs {
					idRuns = append(idRuns, v)
				}
				return ok
			case num == llmv1TokenIDs && typ == protowire.VarintType:
				nids++
				if keepIDs {
					idRuns = append(idRuns, protowire.AppendVarint(nil, x))
				}
			case num == llmv1MaxTokens && typ == protowire.VarintType:
				m.checkOutputLimit("max_tokens", int(uint32(x)))
			}
			return true
		})
		if !ok {
			return RequestMeta{}, nil, nil
		}
		if len(prompt) > 0 {
			m.PromptTokens = estimateTokens(len(prompt))
			text = prompt
		} else {
			m.PromptTokens = nids
			ids = idRuns
		}
	} else {
		var vtext []byte
		var idRuns [][]byte
		textSet, nids := false, 0
		ok := fields(msg, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) bool {
			switch {
			case num == vllmText && typ == protowire.BytesType:
				vtext, textSet, nids, idRuns = v, true, 0, nil
			case num == vllmTokenized && typ == protowire.BytesType:
				if textSet {
					textSet, nids, idRuns = false, 0, nil // the oneof switches to tokenized
				}
				return fields(v, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) bool {
					switch {
					case num == vllmInputIDs && typ == protowire.BytesType:
						c, ok := varints(v)
						nids += c
						if keepIDs {
							idRuns = append(idRuns, v)
						}
						return ok
					case num == vllmInputIDs && typ == protowire.VarintType:
						nids++
						if keepIDs {
							idRuns = append(idRuns, protowire.AppendVarint(nil, x))
						}
					}
					return true
				})
			case num == vllmSampling && typ == protowire.BytesType:
				return fields(v, func(num protowire.Number, typ protowire.Type, _ []byte, x uint64) bool {
					if num == vllmSamplingTokens && typ == protowire.VarintType {
						m.checkOutputLimit("sampling_params.max_tokens", int(uint32(x)))
					}
					return true
				})
			}
			return true
		})
		if !ok {
			return RequestMeta{}, nil, nil
		}
		if textSet && len(vtext) > 0 {
			m.PromptTokens = estimateTokens(len(vtext))
			text = vtext
		} else if !textSet {
			m.PromptTokens = nids
			ids = idRuns
		}
	}
	m.Stream = true
	return m, text, ids
}

// fields calls f for each field of a protobuf message: v is a
// length-delimited value, x a varint's; false from f or a malformed
// message stops it and returns false.
func fields(msg []byte, f func(num protowire.Number, typ protowire.Type, v []byte, x uint64) bool) bool {
	for len(msg) > 0 {
		num, typ, k := protowire.ConsumeTag(msg)
		if k < 0 {
			return false
		}
		msg = msg[k:]
		var v []byte
		var x uint64
		switch typ {
		case protowire.BytesType:
			v, k = protowire.ConsumeBytes(msg)
		case protowire.VarintType:
			x, k = protowire.ConsumeVarint(msg)
		default:
			k = protowire.ConsumeFieldValue(num, typ, msg)
		}
		if k < 0 || !f(num, typ, v, x) {
			return false
		}
		msg = msg[k:]
	}
	return true
}

// varints counts the varints of a packed repeated field.
func varints(b []byte) (int, bool) {
	n := 0
	for len(b) > 0 {
		_, k := protowire.ConsumeVarint(b)
		if k < 0 {
			return n, false
		}
		b = b[k:]
		n++
	}
	return n, true
}
