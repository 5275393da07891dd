package gateway

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/llmesh/llmesh/exchange"
)

func TestSplicerRewrite(t *testing.T) {
	sp := newSplicer(exchange.APIChat)
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
	got, err := sp.rewrite([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, string(got)); diff != "" {
		t.Errorf("rewrite (-want +got):\n%s", diff)
	}
}

// TestSpliceVerdict: a chat continuation whose text starts like the text
// the client already has is a restart (whether it runs past checkBytes or
// ends first); one that diverges passes at its first differing event, with
// the events it held, in order.
func TestSpliceVerdict(t *testing.T) {
	ev := func(text string, finish bool) string {
		f := "null"
		if finish {
			f = `"stop"`
		}
		return `data: {"choices":[{"index":0,"delta":{"content":` + strconv.Quote(text) + `},"finish_reason":` + f + `}]}` + "\n\n"
	}
	long := strings.Repeat("word ", 20)
	for _, tc := range []struct {
		name, sent string
		events     []string
		restarted  bool
		passAt     int // index of the event whose rewrite releases the held events
	}{
		{"continues", "one two", []string{ev(" three", false), ev(" four", true)}, false, 0},
		{"repeats a short text", "one two", []string{ev("one", false), ev(" two", false)}, true, -1},
		{"repeats a long text", long, []string{ev(long[:30], false), ev(long[30:70], false)}, true, -1},
		{"ends on a repeated prefix", "one two", []string{ev("one", true)}, true, -1},
		{"diverges after a shared start", "one two", []string{ev("one", false), ev(" three", false)}, false, 1},
		{"leading space aside", "one two", []string{ev(" one two", false)}, true, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sp := newSplicer(exchange.APIChat)
			sp.rewriting, sp.checking, sp.sent = true, true, tc.sent
			var got string
			var err error
			for i, e := range tc.events {
				var out []byte
				out, err = sp.rewrite([]byte(e))
				if err != nil {
					break
				}
				if len(out) > 0 && i != tc.passAt && tc.passAt >= 0 && got == "" {
					t.Errorf("events released at %d, want at %d", i, tc.passAt)
				}
				got += string(out)
			}
			if err == nil {
				rest, serr := sp.settle()
				err = serr
				got += string(rest)
			}
			if tc.restarted {
				if !errors.Is(err, ErrContinuationRestarted) || got != "" {
					t.Errorf("err %v, passed %q; want ErrContinuationRestarted and nothing passed", err, got)
				}
				return
			}
			if err != nil || got != strings.Join(tc.events, "") {
				t.Errorf("err %v, passed %q; want %q", err, got, strings.Join(tc.events, ""))
			}
		})
	}
}

func TestContinuationBody(t *testing.T) {
	for _, tc := range []struct {
		name, orig, want string
		kind             exchange.API
		ok               bool
	}{
		{"completions", `{"prompt":"a b","max_tokens":10,"min_tokens":4,"stream":true}`,
			`{"max_tokens":7,"min_tokens":1,"prompt":"a b c d e","stream":true}`, exchange.APICompletions, true},
		{"chat", `{"messages":[{"role":"user","content":"q"}],"max_completion_tokens":5}`,
			`{"add_generation_prompt":false,"continue_final_message":true,"max_completion_tokens":2,"messages":[{"role":"user","content":"q"},{"content":" c d e","role":"assistant"}]}`, exchange.APIChat, true},
		{"nothing left", `{"prompt":"a","max_tokens":3}`, ``, exchange.APICompletions, false},
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
