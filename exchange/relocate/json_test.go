package relocate

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func httpPlan(t testing.TB, rule HTTPRule, path, value string) *HTTPPlan {
	t.Helper()
	if rule.Header == "" {
		rule.Header = "x-prompt"
	}
	if rule.Threshold == (Threshold{}) {
		rule.Threshold.Bytes = 1
	}
	r := mustCompile(t, Config{HTTP: []HTTPRule{rule}})
	p, err := r.PlanHTTP(path, hdrs{"x-prompt": {value}})
	if err != nil || p == nil {
		t.Fatalf("PlanHTTP: %+v, %v", p, err)
	}
	return p
}

func TestRewriteJSON(t *testing.T) {
	for _, tc := range []struct {
		name, path, body, value, want string
	}{
		{"add prompt", "/v1/completions", `{"model":"m"}`, "hi", `{"model":"m","prompt":"hi"}`},
		{"add to empty", "/v1/completions", ` { } `, "hi", ` { "prompt":"hi"} `},
		{"replace prompt", "/v1/completions", `{"prompt": ["a", {"b":"}"}], "n":1}`, "hi", `{"prompt": "hi", "n":1}`},
		{"last duplicate wins", "/v1/completions", `{"prompt":"a","prompt":"b"}`, "hi", `{"prompt":"a","prompt":"hi"}`},
		{"escaped key", "/v1/completions", `{"pro\u006dpt":1}`, "hi", `{"pro\u006dpt":"hi"}`},
		{"nested prompt untouched", "/v1/completions", `{"x":{"prompt":"a"}}`, "hi", `{"x":{"prompt":"a"},"prompt":"hi"}`},
		{"escaping", "/v1/completions", `{}`, "a\"b\\c\nd\te\x01ü", `{"prompt":"a\"b\\c\nd\te\u0001ü"}`},
		{"chat append", "/v1/chat/completions", `{"messages":[{"role":"system","content":"s"}]}`, "q", `{"messages":[{"role":"system","content":"s"},{"role":"user","content":"q"}]}`},
		{"chat empty", "/v1/chat/completions", `{"messages":[ ]}`, "q", `{"messages":[ {"role":"user","content":"q"}]}`},
		{"chat null", "/v1/chat/completions", `{"messages":null}`, "q", `{"messages":[{"role":"user","content":"q"}]}`},
		{"chat absent", "/v1/chat/completions", `{"model":"m"}`, "q", `{"model":"m","messages":[{"role":"user","content":"q"}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var moved int
			out, err := RewriteJSON([]byte(tc.body), httpPlan(t, HTTPRule{}, tc.path, tc.value), func(kind string, n int) { moved = n })
			if err != nil {
				t.Fatal(err)
			}
			if got := string(out.Bytes()); got != tc.want {
				t.Fatalf("got  %s\nwant %s", got, tc.want)
			}
			if out.Len() != len(tc.want) || moved != len(tc.value) {
				t.Fatalf("Len %d (want %d), moved %d", out.Len(), len(tc.want), moved)
			}
			var buf bytes.Buffer
			if _, err := buf.ReadFrom(out.Reader()); err != nil || buf.String() != tc.want {
				t.Fatalf("Reader gave %q, %v", buf.String(), err)
			}
		})
	}
}

func TestRewriteJSONErrors(t *testing.T) {
	for _, tc := range []struct {
		name, path, body, value string
		rule                    HTTPRule
		want                    error
		msg                     string
	}{
		{"empty", "/v1/completions", ``, "v", HTTPRule{}, ErrMalformed, "not valid JSON"},
		{"array", "/v1/completions", `[]`, "v", HTTPRule{}, ErrMalformed, "not a JSON object"},
		{"trailing", "/v1/completions", `{} {}`, "v", HTTPRule{}, ErrMalformed, "not valid JSON"},
		{"messages not array", "/v1/chat/completions", `{"messages":"x"}`, "v", HTTPRule{}, ErrMalformed, `"messages" is not an array`},
		{"bad utf-8", "/v1/completions", `{}`, "a\xffb", HTTPRule{}, ErrInvalidValue, "UTF-8 at byte 1"},
		{"body limit", "/v1/completions", `{"a":"` + strings.Repeat("x", 100) + `"}`, "v", HTTPRule{MaxBody: 64}, ErrTooLarge, "request body of 108 bytes exceeds relocation.http[0].max_body = 64"},
		{"result limit", "/v1/completions", `{}`, strings.Repeat("v", 60), HTTPRule{MaxBody: 64}, ErrTooLarge, "with the relocated value"},
	} {
		_, err := RewriteJSON([]byte(tc.body), httpPlan(t, tc.rule, tc.path, tc.value), nil)
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: got %v, want %v containing %q", tc.name, err, tc.want, tc.msg)
		}
	}
}

func randJSONValue(rng *rand.Rand, depth int) any {
	switch k := rng.IntN(7); {
	case k == 0 && depth < 3:
		m := map[string]any{}
		for range rng.IntN(4) {
			m[randString(rng, 1+rng.IntN(6), false)] = randJSONValue(rng, depth+1)
		}
		return m
	case k == 1 && depth < 3:
		var a []any
		for range rng.IntN(4) {
			a = append(a, randJSONValue(rng, depth+1))
		}
		return a
	case k == 2:
		return rng.IntN(1000)
	case k == 3:
		return rng.IntN(2) == 0
	case k == 4:
		return nil
	default:
		return randString(rng, rng.IntN(20), false) + "\"\\\n\t\x02"
	}
}

// TestRewriteJSONProperty: for random bodies (compact or indented) and
// random prompts, decoding the rewritten body gives the original document
// with the prompt set or a user message appended.
func TestRewriteJSONProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for i := range 300 {
		doc := map[string]any{}
		for range rng.IntN(6) {
			doc[[]string{"model", "max_tokens", "prompt", "messages", "stream", randString(rng, 5, true)}[rng.IntN(6)]] = randJSONValue(rng, 0)
		}
		chat := rng.IntN(2) == 0
		if chat && rng.IntN(3) != 0 {
			var msgs []any
			for range rng.IntN(3) {
				msgs = append(msgs, map[string]any{"role": "system", "content": randString(rng, 10, false)})
			}
			doc["messages"] = msgs
		} else if chat {
			delete(doc, "messages")
		}
		body, err := json.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		if rng.IntN(2) == 0 {
			var ind bytes.Buffer
			if err := json.Indent(&ind, body, " ", "\t"); err != nil {
				t.Fatal(err)
			}
			body = ind.Bytes()
		}
		prompt := randString(rng, 1+rng.IntN(3000), false) + "\"\\\x00\u2028"
		path := "/v1/completions"
		want := map[string]any{}
		if err := json.Unmarshal(body, &want); err != nil {
			t.Fatal(err)
		}
		if chat {
			path = "/v1/chat/completions"
			msgs, _ := want["messages"].([]any)
			want["messages"] = append(msgs, map[string]any{"role": "user", "content": prompt})
		} else {
			want["prompt"] = prompt
		}
		out, err := RewriteJSON(body, httpPlan(t, HTTPRule{}, path, prompt), nil)
		if err != nil {
			t.Fatalf("case %d: %v\n%s", i, err, body)
		}
		got := map[string]any{}
		if err := json.Unmarshal(out.Bytes(), &got); err != nil {
			t.Fatalf("case %d: rewritten body does not decode: %v\n%s", i, err, out.Bytes())
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("case %d: (-want +got):\n%s", i, diff)
		}
	}
}

// TestNeedsAttention checks the 8-byte fast path against a byte-wise
// reference: every byte value in every position, plus random words.
func TestNeedsAttention(t *testing.T) {
	ref := func(x uint64) bool {
		for range 8 {
			c := byte(x)
			if c < 0x20 || c == '"' || c == '\\' || c >= 0x80 {
				return true
			}
			x >>= 8
		}
		return false
	}
	const plain = 0x6161616161616161 // "aaaaaaaa"
	for pos := range 8 {
		for c := range 256 {
			x := plain&^(0xff<<(8*pos)) | uint64(c)<<(8*pos)
			if got, want := needsAttention(x), ref(x); got != want {
				t.Fatalf("byte %#x at %d: got %v, want %v", c, pos, got, want)
			}
		}
	}
	rng := rand.New(rand.NewPCG(9, 9))
	for range 100000 {
		x := rng.Uint64()
		if got, want := needsAttention(x), ref(x); got != want {
			t.Fatalf("%#x: got %v, want %v", x, got, want)
		}
	}
}

func BenchmarkAppendJSONString(b *testing.B) {
	s := benchPrompt(1 << 20)
	dst := make([]byte, 0, len(s)+64)
	b.SetBytes(int64(len(s)))
	for b.Loop() {
		if _, err := appendJSONString(dst[:0], s); err != nil {
			b.Fatal(err)
		}
	}
}
