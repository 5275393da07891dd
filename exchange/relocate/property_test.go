package relocate

import (
	"encoding/base64"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/llmesh/llmesh/api/llmv1"
	"github.com/llmesh/llmesh/api/vllmpb"
)

func randString(rng *rand.Rand, n int, ascii bool) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,;:!?'\"-_()[]{}<>/\\|@#$%^&*+=~`"
	runes := []rune("äöüßéèñçøå中文字日本語한국어😀🚀∑∫≈")
	var b strings.Builder
	for b.Len() < n {
		if ascii || rng.IntN(8) != 0 {
			b.WriteByte(alphabet[rng.IntN(len(alphabet))])
		} else {
			b.WriteRune(runes[rng.IntN(len(runes))])
		}
	}
	return b.String()
}

func randPromptLen(rng *rand.Rand) int {
	switch rng.IntN(4) {
	case 0:
		return 1 + rng.IntN(16)
	case 1:
		return 1 + rng.IntN(300)
	case 2:
		return 1 + rng.IntN(20000)
	default:
		return 50000 + rng.IntN(100000)
	}
}

func randLLM(rng *rand.Rand) *llmv1.GenerateRequest {
	m := &llmv1.GenerateRequest{}
	if rng.IntN(2) == 0 {
		m.Model = randString(rng, rng.IntN(40), false)
	}
	if rng.IntN(3) == 0 {
		m.Prompt = randString(rng, rng.IntN(200), false) // overridden by the relocated one
	}
	for range rng.IntN(20) {
		m.PromptTokenIds = append(m.PromptTokenIds, rng.Uint32())
	}
	m.MaxTokens = uint32(rng.IntN(4096))
	if rng.IntN(2) == 0 {
		s := &llmv1.SamplingParams{IgnoreEos: rng.IntN(2) == 0, MinTokens: uint32(rng.IntN(9))}
		if rng.IntN(2) == 0 {
			s.Temperature = proto.Float32(rng.Float32())
		}
		if rng.IntN(2) == 0 {
			s.Seed = proto.Int32(rng.Int32())
		}
		for range rng.IntN(3) {
			s.Stop = append(s.Stop, randString(rng, 1+rng.IntN(5), false))
		}
		m.Sampling = s
	}
	m.Priority = int32(rng.IntN(200) - 100)
	if rng.IntN(2) == 0 {
		m.RequestId = randString(rng, 16, true)
	}
	return m
}

func randVLLM(rng *rand.Rand) *vllmpb.GenerateRequest {
	m := &vllmpb.GenerateRequest{RequestId: randString(rng, rng.IntN(30), true), Stream: rng.IntN(2) == 0}
	switch rng.IntN(3) {
	case 0:
		tk := &vllmpb.TokenizedInput{OriginalText: randString(rng, rng.IntN(50), false)}
		for range rng.IntN(30) {
			tk.InputIds = append(tk.InputIds, rng.Uint32N(200000))
		}
		m.Input = &vllmpb.GenerateRequest_Tokenized{Tokenized: tk}
	case 1:
		m.Input = &vllmpb.GenerateRequest_Text{Text: randString(rng, rng.IntN(100), false)}
	}
	if rng.IntN(2) == 0 {
		sp := &vllmpb.SamplingParams{MinTokens: uint32(rng.IntN(5)), IgnoreEos: rng.IntN(2) == 0}
		if rng.IntN(2) == 0 {
			sp.MaxTokens = proto.Uint32(uint32(rng.IntN(4096)))
		}
		if rng.IntN(2) == 0 {
			sp.Seed = proto.Int32(rng.Int32())
		}
		m.SamplingParams = sp
	}
	return m
}

// propertyCase is one random message with the expectation after relocation.
type propertyCase struct {
	msg, want proto.Message
	field     int
	newMsg    func() proto.Message
}

// TestRelocationProperty: for random llm.v1 and vLLM requests, random prompts
// (text or -bin metadata, padded or raw base64), random chunkings and
// compression, decoding the rewritten first message with its generated type
// yields the original message with the prompt field set, both rewriters
// agree byte for byte, and a second message passes through unchanged.
func TestRelocationProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	iters := 120
	if testing.Short() {
		iters = 40
	}
	for i := range iters {
		var c propertyCase
		prompt := randString(rng, randPromptLen(rng), false)
		if rng.IntN(2) == 0 {
			m := randLLM(rng)
			want := proto.Clone(m).(*llmv1.GenerateRequest)
			want.Prompt = prompt
			c = propertyCase{msg: m, want: want, field: 2, newMsg: func() proto.Message { return &llmv1.GenerateRequest{} }}
		} else {
			m := randVLLM(rng)
			want := proto.Clone(m).(*vllmpb.GenerateRequest)
			want.Input = &vllmpb.GenerateRequest_Text{Text: prompt}
			c = propertyCase{msg: m, want: want, field: 3, newMsg: func() proto.Message { return &vllmpb.GenerateRequest{} }}
		}
		key, raw := "x-prompt-raw", prompt
		switch rng.IntN(3) {
		case 1:
			key, raw = "x-prompt-bin", base64.StdEncoding.EncodeToString([]byte(prompt))
		case 2:
			key, raw = "x-prompt-bin", base64.RawStdEncoding.EncodeToString([]byte(prompt))
		}
		typ := String
		if rng.IntN(4) == 0 {
			typ = Bytes // same wire type; the generated string field still decodes
		}
		plan := grpcPlan(t, GRPCRule{Key: key, Field: c.field, Type: typ, Threshold: Threshold{Bytes: 1}, MaxMessage: 64 << 20}, raw)

		body, err := proto.Marshal(c.msg)
		if err != nil {
			t.Fatal(err)
		}
		compress := rng.IntN(5) == 0
		second := frame(t, []byte(randString(rng, rng.IntN(100), true)), false)
		in := append(frame(t, body, compress), second...)
		cs := chunks(rng, in)

		var moved int
		w := NewGRPCRewriter(plan, "gzip", func(kind string, n int) {
			if kind != KindGRPC {
				t.Errorf("OnRelocated kind %q", kind)
			}
			moved += n
		})
		push, err := pushAll(w, cs)
		if err != nil {
			t.Fatalf("case %d: push: %v", i, err)
		}
		if moved != len(prompt) {
			t.Fatalf("case %d: OnRelocated reported %d bytes, want %d", i, moved, len(prompt))
		}
		pull, err := pullAll(plan, "gzip", cs)
		if err != nil {
			t.Fatalf("case %d: pull: %v", i, err)
		}
		if string(push) != string(pull) {
			t.Fatalf("case %d: push and pull outputs differ (%d vs %d bytes)", i, len(push), len(pull))
		}
		msg, rest := unframe(t, push)
		if compress != (push[0] == 1) {
			t.Fatalf("case %d: compressed in = %v, out flag = %d", i, compress, push[0])
		}
		if string(rest) != string(second) {
			t.Fatalf("case %d: second message changed", i)
		}
		got := c.newMsg()
		if err := proto.Unmarshal(msg, got); err != nil {
			t.Fatalf("case %d: decode rewritten message: %v", i, err)
		}
		if proto.Equal(c.want, got) {
			continue
		}
		if diff := cmp.Diff(c.want, got, protocmp.Transform()); diff != "" {
			t.Fatalf("case %d: rewritten message (-want +got):\n%.2000s", i, diff)
		}
	}
}
