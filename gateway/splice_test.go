package gateway

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSplicerRewrite(t *testing.T) {
	sp := newSplicer(apiChat)
	sp.track([]byte(`data: {"id":"first","created":7,"choices":[{"delta":{"role":"assistant","content":""}}]}` + "\n\n"))
	sp.before = 3
	sp.rewriting = true
	in := strings.Join([]string{
		`data: {"id":"second","created":9,"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`,
		`data: {"id":"second","created":9,"choices":[{"index":0,"delta":{"content":" d"},"finish_reason":null}]}`,
		`: keep-alive comment`,
		`data: {"id":"second","created":9,"choices":[],"usage":{"prompt_tokens":13,"completion_tokens":2,"total_tokens":15}}`,
		`data: [DONE]`,
	}, "\r\n\r\n") + "\r\n\r\n"
	want := strings.Join([]string{
		`data: {"choices":[{"index":0,"delta":{"content":" d"},"finish_reason":null}],"created":7,"id":"first"}`,
		`: keep-alive comment`,
		`data: {"choices":[],"created":7,"id":"first","usage":{"completion_tokens":5,"prompt_tokens":10,"total_tokens":15}}`,
		`data: [DONE]`,
	}, "\n\n") + "\n\n"
	if diff := cmp.Diff(want, string(sp.rewrite([]byte(in)))); diff != "" {
		t.Errorf("rewrite (-want +got):\n%s", diff)
	}
}

func TestContinuationBody(t *testing.T) {
	for _, tc := range []struct {
		name, orig, want string
		kind             apiKind
		ok               bool
	}{
		{"completions", `{"prompt":"a b","max_tokens":10,"min_tokens":4,"stream":true}`,
			`{"max_tokens":7,"min_tokens":1,"prompt":"a b c d e","stream":true}`, apiCompletions, true},
		{"chat", `{"messages":[{"role":"user","content":"q"}],"max_completion_tokens":5}`,
			`{"add_generation_prompt":false,"continue_final_message":true,"max_completion_tokens":2,"messages":[{"role":"user","content":"q"},{"content":" c d e","role":"assistant"}]}`, apiChat, true},
		{"nothing left", `{"prompt":"a","max_tokens":3}`, ``, apiCompletions, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body, ok, err := newSplicer(tc.kind).continuationBody([]byte(tc.orig), " c d e", 3)
			if err != nil || ok != tc.ok {
				t.Fatalf("ok=%v err=%v", ok, err)
			}
			if diff := cmp.Diff(tc.want, string(body)); ok && diff != "" {
				t.Errorf("body (-want +got):\n%s", diff)
			}
		})
	}
}
