package exchange

import (
	"encoding/binary"

	"google.golang.org/protobuf/encoding/protowire"
)

// llmv1ModelField is llm.v1.GenerateRequest.model (api/proto/llm/v1).
const llmv1ModelField = protowire.Number(1)

// requestModel reads the model a request names from its body, for hosts
// that record it without reading the body before admission: the "model"
// member of an OpenAI JSON body, or llm.v1.GenerateRequest.model of an
// uncompressed first gRPC message on MethodLLMV1. "" when the body names
// none or cannot be read (vLLM's engine API carries no model).
func requestModel(method string, body []byte, grpc bool) string {
	if !grpc {
		req, err := ParseOpenAIRequest(body)
		if err != nil {
			return ""
		}
		return req.Model
	}
	if method != MethodLLMV1 || len(body) < 5 || body[0] != 0 {
		return ""
	}
	n := binary.BigEndian.Uint32(body[1:5])
	if uint64(n) > uint64(len(body)-5) {
		return ""
	}
	msg := body[5 : 5+n]
	var model []byte // the last one wins, as in proto.Unmarshal
	for len(msg) > 0 {
		num, typ, k := protowire.ConsumeTag(msg)
		if k < 0 {
			return ""
		}
		msg = msg[k:]
		if num == llmv1ModelField && typ == protowire.BytesType {
			v, k := protowire.ConsumeBytes(msg)
			if k < 0 {
				return ""
			}
			model, msg = v, msg[k:]
			continue
		}
		k = protowire.ConsumeFieldValue(num, typ, msg)
		if k < 0 {
			return ""
		}
		msg = msg[k:]
	}
	return string(model)
}
