package exchange

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/llmesh/llmesh/internal/jsonscan"
)

// templateStream builds an event stream of one chunk shape around texts.
func templateStream(prefix, suffix string, texts ...string) []byte {
	var b bytes.Buffer
	for _, x := range texts {
		b.WriteString("data: " + prefix + x + suffix + "\n\n")
	}
	b.WriteString("data: [DONE]\n\n")
	return b.Bytes()
}

// TestTemplateAgreesWithGeneral feeds streams built to hit, and to just
// miss, the fast path, and checks the observation equals the general
// scanner's, event by event and split anywhere.
func TestTemplateAgreesWithGeneral(t *testing.T) {
	const chatPre = `{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"`
	const chatSuf = `"},"logprobs":null,"finish_reason":null}]}`
	cases := []struct {
		name     string
		data     []byte
		wantHits int // fast-path answers in the unsplit stream
	}{
		{"chat", templateStream(chatPre, chatSuf, "a", "b", "c", " d"), 3},
		{"completions", templateStream(`{"choices":[{"text":"`, `","index":0}]}`, "x", "y"), 1},
		{"escapes", templateStream(chatPre, chatSuf, "a", `\"`, `\\`, `\u00e9`, `x\\\"y`), 4},
		// The text's closing quote is escaped: the string runs on, so the
		// shape differs and the general scanner decides (malformed here).
		{"escaped close", templateStream(chatPre, chatSuf, "a", `b\`), 0},
		// An unescaped quote inside: the string ends early.
		{"early quote", templateStream(chatPre, chatSuf, "a", `b","x":"y`), 0},
		{"empty text", templateStream(chatPre, chatSuf, "a", "", "b"), 1},
		{"reasoning not kept", templateStream(`{"choices":[{"delta":{"reasoning_content":"`, `"}}]}`, "r", "s"), 1},
		{"second choice", templateStream(`{"choices":[{"delta":{}},{"delta":{"content":"`, `"}}]}`, "a", "b"), 1},
		{"usage null", templateStream(`{"choices":[{"text":"`, `"}],"usage":null}`, "a", "b"), 1},
		{"mixed", []byte("data: " + chatPre + "a" + chatSuf + "\n\n" +
			"data: " + chatPre + "b" + `"},"logprobs":null,"finish_reason":"stop"}]}` + "\n\n" +
			"data: " + chatPre + "c" + chatSuf + "\n\n" +
			"event: error\ndata: " + chatPre + "d" + chatSuf + "\n\n" +
			"data: " + `{"id":"c2","choices":[{"index":0,"delta":{"content":"e"}}]}` + "\n\n" +
			"data: " + chatPre + "f" + chatSuf + `,"usage":{"completion_tokens":9}}` + "\n\n" +
			"data: " + chatPre + "g" + chatSuf + "\n\n" +
			"data: [DONE]\n\n"), 1},
		// A shape learned from a two-line event holds a line break: a
		// one-line event with those bytes is two lines, and the second is
		// not data.
		{"multi-line shape", []byte("data: {\"choices\":[{\"text\":\ndata: \"a\"}]}\n\n" +
			"data: {\"choices\":[{\"text\":\n\"b\"}]}\n\n" +
			"data: {\"choices\":[{\"text\":\ndata: \"c\"}]}\n\n"), 1},
		{"not learned from effects", templateStream(`{"choices":[{"text":"`, `","finish_reason":"stop"}]}`, "a", "b"), 0},
		{"two texts", templateStream(`{"choices":[{"delta":{"reasoning":"r","content":"`, `"}}]}`, "a", "b"), 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			opts := Options{KeepOutput: true}
			o := NewObserver(opts)
			o.ResponseHeaders(at(1), 200, MapHeaders{"content-type": "text/event-stream"})
			_ = o.Observe(at(2), tc.data)
			if o.tmpl.hits != tc.wantHits {
				t.Errorf("fast path answered %d events, want %d", o.tmpl.hits, tc.wantHits)
			}
			want, _ := observeSplitPath(opts, "text/event-stream", tc.data, nil, true)
			for c := 0; c <= len(tc.data); c++ {
				got, _ := observeSplitPath(opts, "text/event-stream", tc.data, []int{c}, false)
				if diff := cmp.Diff(want, got); diff != "" {
					t.Fatalf("cut at %d (-general +fast):\n%s", c, diff)
				}
			}
		})
	}
}

// FuzzSSETemplate builds streams of one shape around fuzzed texts, so the
// fuzzer spends its time where the fast path answers, and checks the
// observation against the general scanner.
func FuzzSSETemplate(f *testing.F) {
	f.Add(`{"id":"x","choices":[{"index":0,"delta":{"content":"`, `"},"finish_reason":null}]}`, `a|b|\"|\\|\\\"|é`, uint64(1))
	f.Add(`{"choices":[{"text":"`, `"}]}`, `x|y"|z`, uint64(2))
	f.Add(`{"choices":[{"text":"`, `","finish_reason":"stop"}],"usage":{"completion_tokens":2}}`, `x|y`, uint64(3))
	f.Add(`{"choices":[{"delta":{"content":"`, `"}}]}`+"\ndata: ", `a||b\`, uint64(4))
	f.Fuzz(func(t *testing.T, prefix, suffix, texts string, seed uint64) {
		data := templateStream(prefix, suffix, strings.Split(texts, "|")...)
		opts := Options{KeepOutput: true, MaxEventBytes: 512}
		cuts := splitFromSeed(seed, len(data))
		want, _ := observeSplitPath(opts, "text/event-stream", data, nil, true)
		got, _ := observeSplitPath(opts, "text/event-stream", data, cuts, false)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("fast path differs from the general scanner (-general +fast):\n%s", diff)
		}
	})
}

// FuzzLineText checks the one-pass text scan against the vectorised
// scans it stands in for.
func FuzzLineText(f *testing.F) {
	for _, s := range []string{`abc"x`, `a\"b"`, `a\\"`, "a\nb\"", "a\\\n\"", `\`, strings.Repeat(`\\`, 40) + `"`, strings.Repeat("x", 70) + "\r\""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		wantEnd := jsonscan.ClosingQuote(b)
		wantEsc := false
		if wantEnd >= 0 && lineEnd(b[:wantEnd]) >= 0 {
			wantEnd = -1
		}
		if wantEnd >= 0 {
			wantEsc = bytes.IndexByte(b[:wantEnd], '\\') >= 0
		}
		end, esc := lineText(b)
		if end != wantEnd || (end >= 0 && esc != wantEsc) {
			t.Fatalf("lineText(%q) = %d, %v; want %d, %v", b, end, esc, wantEnd, wantEsc)
		}
	})
}
