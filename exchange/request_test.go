package exchange

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestOpenAIRequestSizing(t *testing.T) {
	for _, tc := range []struct {
		body          string
		limit, prompt int
	}{
		{`{"prompt":"abcdef","max_tokens":7}`, 7, 2},                                          // 8 bytes with quotes
		{`{"messages":[{"content":"ab"},{"content":"abc"}],"max_completion_tokens":3}`, 3, 3}, // 4 + 5 bytes
		{`{"max_tokens":5,"max_completion_tokens":9}`, 5, 0},
		{`{"max_tokens":-2}`, -2, 0},
		{`{}`, 0, 0},
	} {
		r, err := ParseOpenAIRequest([]byte(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		if got := r.OutputLimit(); got != tc.limit {
			t.Errorf("%s: OutputLimit %d, want %d", tc.body, got, tc.limit)
		}
		if got := r.PromptTokens(); got != tc.prompt {
			t.Errorf("%s: PromptTokens %d, want %d", tc.body, got, tc.prompt)
		}
	}
}

// requestCase is a body for the differential tests; fast says whether the
// fast path must decode it itself (the shapes real clients send), so that
// a regression to encoding/json for them shows up as a failure here rather
// than only as a slower benchmark.
type requestCase struct {
	name string
	body string
	fast bool
}

// requestCases are real OpenAI and vLLM request bodies and the corners of
// encoding/json that ParseOpenAIRequest must reproduce.
var requestCases = []requestCase{
	{"chat", `{"model":"llama-3.1-8b","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Hi"}],"stream":true,"max_tokens":64}`, true},
	{"chat usage", `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Say hi"}],"stream":true,"stream_options":{"include_usage":true},"max_completion_tokens":16,"temperature":0.7,"top_p":1,"n":1}`, true},
	{"chat parts", `{"model":"gpt-4o","messages":[{"role":"user","content":[{"type":"text","text":"What is in this image?"},{"type":"image_url","image_url":{"url":"https://example.com/a.png","detail":"low"}}]}],"max_tokens":300}`, true},
	{"chat tools", `{"model":"gpt-4o","messages":[{"role":"user","content":"Weather in Paris?"},{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},{"role":"tool","tool_call_id":"call_1","content":"18C"}],"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}],"tool_choice":"auto"}`, true},
	{"chat unicode", "{\"model\":\"qwen2.5-7b\",\"messages\":[{\"role\":\"user\",\"content\":\"日本語で答えて \\u00e9\\ud83d\\ude00 \\\"q\\\" \\n\"}],\"stream\":false}", true},
	{"chat spaced", "{\n  \"model\" : \"m\" ,\n  \"messages\" : [ { \"content\" : \"a\" } , { \"role\" : \"user\" } ] ,\n  \"stream\" : true\n}\n", true},
	{"chat response_format", `{"model":"m","messages":[{"role":"user","content":"json please"}],"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object","properties":{"a":{"type":"array","items":{"type":"number"}}}}}},"seed":42,"logit_bias":{"50256":-100},"user":"u-1","metadata":{"ü":"ß"}}`, true},
	{"completions", `{"model":"llama-3.1-8b","prompt":"Once upon a time","max_tokens":128,"stream":true,"temperature":0,"echo":false,"logprobs":null,"best_of":1,"n":1}`, true},
	{"completions batch", `{"model":"m","prompt":["a","b"],"max_tokens":4}`, true},
	{"completions tokens", `{"model":"m","prompt":[[1,2,3],[4,5]],"max_tokens":4,"logprobs":5,"echo":true}`, true},
	{"completions logprobs bool", `{"model":"m","prompt":"x","logprobs":true,"top_logprobs":3}`, true},
	{"vllm extensions", `{"model":"m","prompt":"x","max_tokens":8,"top_k":50,"min_p":0.05,"repetition_penalty":1.1,"priority":-3,"guided_json":{"type":"object"},"guided_choice":["yes","no"],"skip_special_tokens":true,"stop_token_ids":[128001,128009],"chat_template_kwargs":{"enable_thinking":false},"extra_body":{"ignore_eos":true},"bad_words":[],"seed":null}`, true},
	{"empty", `{}`, true},
	{"empty spaced", " \t\r\n{ \n}\r\n ", true},
	{"messages empty", `{"messages":[]}`, true},
	{"messages null", `{"messages":null}`, true},
	{"messages null element", `{"messages":[null,{"content":"x"},null]}`, true},
	{"messages empty element", `{"messages":[{}]}`, true},
	{"content null", `{"messages":[{"content":null}]}`, true},
	{"content repeated", `{"messages":[{"content":"a","content":["b",1]}]}`, true},
	{"content folded", `{"messages":[{"Content":"a"},{"CONTENT":"bb"}]}`, true},
	{"folded keys", `{"MODEL":"a","Stream":true,"Max_Tokens":5,"PROMPT":"p","N":2,"Best_Of":3,"ECHO":true,"LogProbs":1,"Stream_Options":{"Include_Usage":true},"Messages":[]}`, true},
	{"exact then folded", `{"model":"a","Model":"b"}`, true},
	{"folded then exact", `{"Model":"b","model":"a"}`, true},
	{"duplicate int", `{"max_tokens":5,"max_tokens":7}`, true},
	{"int then null", `{"max_tokens":5,"max_tokens":null}`, true},
	{"null then int", `{"n":null,"n":3}`, true},
	{"string null keeps", `{"model":"a","model":null}`, true},
	{"bool null keeps", `{"stream":true,"stream":null,"echo":true,"echo":null}`, true},
	{"bool false", `{"stream":true,"stream":false}`, true},
	{"raw null", `{"prompt":null,"logprobs":null}`, true},
	{"raw repeated", `{"prompt":"a","prompt":{"x":[1,{"y":null}]}}`, true},
	{"stream_options null", `{"stream_options":null}`, true},
	{"stream_options empty", `{"stream_options":{}}`, true},
	{"include_usage null", `{"stream_options":{"include_usage":true,"include_usage":null,"x":[1]}}`, true},
	{"negative zero", `{"max_tokens":-0}`, true},
	{"max 18 digits", `{"max_tokens":999999999999999999,"n":-999999999999999999}`, true},
	{"model escaped", `{"model":"a\u00e9\"\\\/\b\f\n\r\t"}`, true},
	{"model invalid utf8", "{\"model\":\"a\xffb\xc3\"}", true},
	{"model lone surrogate", `{"model":"\ud800x\udc00"}`, true},
	{"model utf8", `{"model":"modèle-日本"}`, true},
	{"raw invalid utf8", "{\"prompt\":\"\xff\xfe\",\"messages\":[{\"content\":\"\xc0\"}]}", true},
	{"deep ignored", `{"x":` + strings.Repeat("[", 500) + strings.Repeat("]", 500) + `}`, true},
	{"numbers ignored", `{"a":[0,-0,1.5,-1e10,2E+3,3e-2,0.0]}`, true},
	{"long string words", `{"prompt":"` + strings.Repeat("abcdefg\\\"", 40) + `"}`, true},

	// Shapes left to encoding/json (not fast), with the same outcome.
	{"null body", `null`, false},
	{"null body spaced", " null ", false},
	{"top array", `[{"model":"a"}]`, false},
	{"top string", `"x"`, false},
	{"top number", `1`, false},
	{"top true", `true`, false},
	{"empty body", ``, false},
	{"spaces only", "  ", false},
	{"trailing garbage", `{"model":"a"}x`, false},
	{"trailing value", `{"model":"a"} {}`, false},
	{"unterminated", `{"model":"a"`, false},
	{"trailing comma", `{"model":"a",}`, false},
	{"bad in ignored", `{"model":"a","x":[1,2,}`, false},
	{"bad literal in ignored", `{"x":nul}`, false},
	{"bad number in ignored", `{"x":01}`, false},
	{"bad escape in ignored", `{"x":"\q"}`, false},
	{"control char", "{\"x\":\"a\tb\"}", false},
	{"int fraction", `{"max_tokens":1.5}`, false},
	{"int exponent", `{"max_tokens":1e3}`, false},
	{"int overflow", `{"max_tokens":9223372036854775808}`, false},
	{"int 19 digits", `{"max_tokens":9223372036854775807}`, false},
	{"int string", `{"max_tokens":"5"}`, false},
	{"int bool", `{"n":true}`, false},
	{"model number", `{"model":5}`, false},
	{"model object", `{"model":{}}`, false},
	{"stream string", `{"stream":"true"}`, false},
	{"stream number", `{"stream":1}`, false},
	{"messages object", `{"messages":{"content":"a"}}`, false},
	{"messages string", `{"messages":"a"}`, false},
	{"messages element string", `{"messages":["a"]}`, false},
	{"messages element array", `{"messages":[[]]}`, false},
	{"messages element number", `{"messages":[{"content":"a"},1]}`, false},
	{"messages repeated", `{"messages":[{"content":"a"},{"content":"b"}],"messages":[{}]}`, false},
	{"messages then null", `{"messages":[{"content":"a"}],"messages":null}`, false},
	{"stream_options repeated", `{"stream_options":{"include_usage":true},"stream_options":{}}`, false},
	{"stream_options string", `{"stream_options":"x"}`, false},
	{"include_usage string", `{"stream_options":{"include_usage":"yes"}}`, false},
	{"escaped key", `{"mod\u0065l":"a"}`, false},
	{"kelvin key", "{\"ma\u212a_tokens\":3}", false},
	{"long s key", "{\"\u017Ftream\":true}", false},
	{"non-ascii key", `{"modèl":"a"}`, false},
	{"non-ascii content key", "{\"messages\":[{\"\u212Aey\":1,\"content\":\"x\"}]}", false},
	{"deep beyond", `{"x":` + strings.Repeat("[", 1002) + strings.Repeat("]", 1002) + `}`, false},
	{"too deep", `{"x":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}`, false},
}

// TestParseOpenAIRequestMatchesUnmarshal holds ParseOpenAIRequest to
// json.Unmarshal on every case, and the fast path to the cases it must
// decode itself.
func TestParseOpenAIRequestMatchesUnmarshal(t *testing.T) {
	for _, tc := range requestCases {
		t.Run(tc.name, func(t *testing.T) {
			checkParseOpenAIRequest(t, []byte(tc.body))
			var r OpenAIRequest
			if got := parseOpenAIFast([]byte(tc.body), &r); got != tc.fast {
				t.Errorf("fast path took it: %v, want %v", got, tc.fast)
			}
		})
	}
}

// checkParseOpenAIRequest compares ParseOpenAIRequest with json.Unmarshal
// on body: the same fields and the same outcome, and raw values that are
// copies (overwriting body afterwards changes nothing).
func checkParseOpenAIRequest(t *testing.T, body []byte) {
	t.Helper()
	var want OpenAIRequest
	wantErr := json.Unmarshal(body, &want)
	mine := append([]byte(nil), body...)
	got, err := ParseOpenAIRequest(mine)
	for k := range mine {
		mine[k] = '#'
	}
	if (err == nil) != (wantErr == nil) {
		t.Fatalf("ParseOpenAIRequest(%q) error %v, json.Unmarshal error %v", body, err, wantErr)
	}
	if wantErr != nil && !errors.Is(err, wantErr) && err.Error() != "OpenAI request body: "+wantErr.Error() {
		t.Errorf("ParseOpenAIRequest(%q) error %q, want it to wrap %q", body, err, wantErr)
	}
	if reflect.DeepEqual(want, got) {
		return // DeepEqual also tells a nil slice from an empty one
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("ParseOpenAIRequest(%q) differs from json.Unmarshal (-want +got):\n%s", body, diff)
	}
	t.Fatalf("ParseOpenAIRequest(%q) = %#v, json.Unmarshal %#v (a nil slice and an empty one)", body, got, want)
}

// FuzzParseOpenAIRequest is the differential test: on any input,
// ParseOpenAIRequest and json.Unmarshal agree.
func FuzzParseOpenAIRequest(f *testing.F) {
	for _, tc := range requestCases {
		f.Add([]byte(tc.body))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		checkParseOpenAIRequest(t, body)
	})
}
