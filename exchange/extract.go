package exchange

import (
	"errors"

	"google.golang.org/protobuf/encoding/protowire"
)

// Chunk is what an Extractor reports about one uncompressed gRPC message.
// The Observer passes the same *Chunk for every message after resetting it,
// so extractors append into its slices without allocating in steady state.
type Chunk struct {
	// Tokens is the number of output tokens in this message; > 0 makes it a
	// token-bearing chunk.
	Tokens int
	// TokenIDs are the token ids this message carried (appended by the
	// extractor when the API carries ids).
	TokenIDs []uint32
	// Text is generated text in this message; it may alias the message.
	Text []byte
	// Cumulative marks a message that repeats all output so far (vLLM's
	// GenerateComplete): it is token-bearing only if nothing came before.
	Cumulative bool
	// Usage is set when the message reports token usage.
	Usage            bool
	PromptTokens     int
	CompletionTokens int
	// FinishReason, when non-empty, may alias the message.
	FinishReason []byte
}

func (c *Chunk) reset() {
	c.Tokens = 0
	c.TokenIDs = c.TokenIDs[:0]
	c.Text = nil
	c.Cumulative = false
	c.Usage = false
	c.PromptTokens = 0
	c.CompletionTokens = 0
	c.FinishReason = nil
}

// Extractor decodes one gRPC response message of some API into a Chunk.
// Implementations must be safe for concurrent use and must not retain msg.
type Extractor interface {
	Extract(msg []byte, c *Chunk) error
}

// gRPC method paths of the built-in extractors: the generated
// llmv1.Generation_Generate_FullMethodName and
// vllmpb.VllmEngine_Generate_FullMethodName, repeated because the generated
// packages import gRPC (and net/http), which the core does not; a test
// checks that they agree. Hosts use the generated names.
const (
	MethodLLMV1 = "/llm.v1.Generation/Generate"
	MethodVLLM  = "/vllm.grpc.engine.VllmEngine/Generate"
)

// extractorFor returns the built-in extractor for a gRPC method path:
// extractLLMV1 for llm.v1.Generation/Generate, extractVLLM for vLLM's engine API, and
// CountMessages for anything else.
func extractorFor(method string) Extractor {
	switch method {
	case MethodLLMV1:
		return extractLLMV1
	case MethodVLLM:
		return extractVLLM
	}
	return CountMessages
}

// Built-in extractors.
var (
	// extractLLMV1 decodes llm.v1.GenerateResponse{token_ids=1, text=2,
	// usage=3{prompt_tokens=1, completion_tokens=2}, finish_reason=4}.
	extractLLMV1 Extractor = llmV1Extractor{}
	// extractVLLM decodes vllm.grpc.engine.GenerateResponse{oneof chunk=1
	// {token_ids=1, prompt_tokens=2, completion_tokens=3}, complete=2
	// {output_ids=1, finish_reason=2, prompt_tokens=3, completion_tokens=4}}.
	extractVLLM Extractor = vllmExtractor{}
	// CountMessages treats every non-empty message as one token: the best
	// guess for an unknown streaming API.
	CountMessages Extractor = countExtractor{}
)

var (
	_ Extractor = llmV1Extractor{}
	_ Extractor = vllmExtractor{}
	_ Extractor = countExtractor{}
)

var errProto = errors.New("invalid protobuf")

type countExtractor struct{}

func (countExtractor) Extract(msg []byte, c *Chunk) error {
	if len(msg) > 0 {
		c.Tokens = 1
	}
	return nil
}

type llmV1Extractor struct{}

func (llmV1Extractor) Extract(msg []byte, c *Chunk) error {
	for len(msg) > 0 {
		num, typ, n := protowire.ConsumeTag(msg)
		if n < 0 {
			return errProto
		}
		msg = msg[n:]
		switch {
		case num == 1:
			var err error
			if msg, err = appendUint32s(msg, typ, &c.TokenIDs); err != nil {
				return err
			}
			continue
		case num == 2 && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(msg)
			if n < 0 {
				return errProto
			}
			c.Text = v
			msg = msg[n:]
			continue
		case num == 3 && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(msg)
			if n < 0 {
				return errProto
			}
			c.Usage = true
			if err := scanUsage(v, 1, 2, c); err != nil {
				return err
			}
			msg = msg[n:]
			continue
		case num == 4 && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(msg)
			if n < 0 {
				return errProto
			}
			c.FinishReason = v
			msg = msg[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, msg)
		if n < 0 {
			return errProto
		}
		msg = msg[n:]
	}
	c.Tokens = len(c.TokenIDs)
	if c.Tokens == 0 && len(c.Text) > 0 {
		c.Tokens = 1
	}
	return nil
}

// scanUsage reads prompt/completion token counts from a usage-like message.
func scanUsage(msg []byte, promptField, completionField protowire.Number, c *Chunk) error {
	for len(msg) > 0 {
		num, typ, n := protowire.ConsumeTag(msg)
		if n < 0 {
			return errProto
		}
		msg = msg[n:]
		if typ == protowire.VarintType && (num == promptField || num == completionField) {
			v, n := protowire.ConsumeVarint(msg)
			if n < 0 {
				return errProto
			}
			if num == promptField {
				c.PromptTokens = int(uint32(v))
			} else {
				c.CompletionTokens = int(uint32(v))
			}
			msg = msg[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, msg)
		if n < 0 {
			return errProto
		}
		msg = msg[n:]
	}
	return nil
}

// appendUint32s decodes a repeated uint32 field value (packed or not) that
// follows its tag in msg and returns the rest of msg.
func appendUint32s(msg []byte, typ protowire.Type, dst *[]uint32) ([]byte, error) {
	switch typ {
	case protowire.VarintType:
		v, n := protowire.ConsumeVarint(msg)
		if n < 0 {
			return nil, errProto
		}
		*dst = append(*dst, uint32(v))
		return msg[n:], nil
	case protowire.BytesType:
		packed, n := protowire.ConsumeBytes(msg)
		if n < 0 {
			return nil, errProto
		}
		for len(packed) > 0 {
			v, m := protowire.ConsumeVarint(packed)
			if m < 0 {
				return nil, errProto
			}
			*dst = append(*dst, uint32(v))
			packed = packed[m:]
		}
		return msg[n:], nil
	}
	return nil, errProto
}

type vllmExtractor struct{}

func (vllmExtractor) Extract(msg []byte, c *Chunk) error {
	for len(msg) > 0 {
		num, typ, n := protowire.ConsumeTag(msg)
		if n < 0 {
			return errProto
		}
		msg = msg[n:]
		if (num == 1 || num == 2) && typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(msg)
			if n < 0 {
				return errProto
			}
			var err error
			if num == 1 {
				err = vllmChunk(v, c)
			} else {
				err = vllmComplete(v, c)
			}
			if err != nil {
				return err
			}
			msg = msg[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, msg)
		if n < 0 {
			return errProto
		}
		msg = msg[n:]
	}
	c.Tokens = len(c.TokenIDs)
	return nil
}

// vllmChunk decodes GenerateStreamChunk{token_ids=1, prompt_tokens=2,
// completion_tokens=3}. Its counts are running totals, not final usage.
func vllmChunk(msg []byte, c *Chunk) error {
	for len(msg) > 0 {
		num, typ, n := protowire.ConsumeTag(msg)
		if n < 0 {
			return errProto
		}
		msg = msg[n:]
		if num == 1 {
			var err error
			if msg, err = appendUint32s(msg, typ, &c.TokenIDs); err != nil {
				return err
			}
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, msg)
		if n < 0 {
			return errProto
		}
		msg = msg[n:]
	}
	return nil
}

// vllmComplete decodes GenerateComplete{output_ids=1, finish_reason=2,
// prompt_tokens=3, completion_tokens=4}.
//
// Usage is reported only when a count is on the wire: proto3 omits a zero,
// and an engine that leaves these fields unset must not read as "0 tokens".
func vllmComplete(msg []byte, c *Chunk) error {
	c.Cumulative = true
	for len(msg) > 0 {
		num, typ, n := protowire.ConsumeTag(msg)
		if n < 0 {
			return errProto
		}
		msg = msg[n:]
		switch {
		case num == 1:
			var err error
			if msg, err = appendUint32s(msg, typ, &c.TokenIDs); err != nil {
				return err
			}
			continue
		case num == 2 && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(msg)
			if n < 0 {
				return errProto
			}
			c.FinishReason = v
			msg = msg[n:]
			continue
		case (num == 3 || num == 4) && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(msg)
			if n < 0 {
				return errProto
			}
			if num == 3 {
				c.PromptTokens = int(uint32(v))
			} else {
				c.CompletionTokens = int(uint32(v))
				c.Usage = true
			}
			msg = msg[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, msg)
		if n < 0 {
			return errProto
		}
		msg = msg[n:]
	}
	return nil
}
