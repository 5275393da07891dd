package server

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/llmesh/llmesh/sim"
)

func TestParsePromptForms(t *testing.T) {
	for _, tc := range []struct {
		body string
		n    int
	}{
		{`{"prompt":"a b c"}`, 3},
		{`{"prompt":["a b"]}`, 2},
		{`{"prompt":[1,2,3,4]}`, 4},
		{`{"prompt":[[1,2]]}`, 2},
	} {
		r, err := parseCompletion([]byte(tc.body))
		if err != nil || len(r.prompt) != tc.n {
			t.Errorf("%s: %v, %v; want %d tokens", tc.body, r, err, tc.n)
		}
	}
	r, err := parseChat([]byte(`{"messages":[{"role":"system","content":"x y"},{"role":"user","content":[{"type":"text","text":"z"}]}],"max_completion_tokens":5,"max_tokens":9,"priority":-3,"seed":-1,"stream":true,"stream_options":{"include_usage":true}}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.prompt) != 3 || r.maxTokens != 5 || r.priority != -3 || *r.seed != ^uint64(0) || !r.includeUsage {
		t.Errorf("chat parsed as %+v", r)
	}
}

func TestParseFaults(t *testing.T) {
	f, err := ParseFaults("stall=250ms, drop-after=4")
	if err != nil || f.Stall != 250*time.Millisecond || f.DropAfter != 4 || f.Status != 0 {
		t.Errorf("got %+v, %v", f, err)
	}
	for _, bad := range []string{"418", "drop-after=0", "drop-after=x", "stall=-1s", "stall=2h", "stall", strings.Repeat("5", 300)} {
		if _, err := ParseFaults(bad); err == nil {
			t.Errorf("ParseFaults(%q) accepted", bad)
		}
	}
	if _, err := newInjector(0.5, nil, 1); err == nil {
		t.Error("rate without kinds accepted")
	}
	if _, err := newInjector(2, []string{"429"}, 1); err == nil {
		t.Error("rate 2 accepted")
	}
}

func checkParsed(t *testing.T, r *apiRequest, err error) {
	if err != nil {
		var re *requestError
		if !errors.As(err, &re) || re.Msg == "" || re.Status < 400 {
			t.Fatalf("error %v is not a request error", err)
		}
		return
	}
	if len(r.prompt) == 0 || r.maxTokens < 0 {
		t.Fatalf("accepted %+v", r)
	}
	for _, id := range r.prompt {
		if id >= sim.VocabSize {
			t.Fatalf("id %d outside the vocabulary", id)
		}
	}
}

func FuzzParseCompletion(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","prompt":"hello world","max_tokens":4,"stream":true,"stream_options":{"include_usage":true},"priority":2,"seed":5}`,
		`{"prompt":[1,2,3]}`, `{"prompt":[[1,2]]}`, `{"prompt":["a","b"]}`, `{"prompt":[1,"a"]}`, `{"prompt":null}`,
		`{"prompt":"a","max_tokens":-1}`, `{"prompt":"a","max_tokens":1e30}`, `{`, `[]`, `{"prompt":{}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := parseCompletion(body)
		checkParsed(t, r, err)
	})
}

func FuzzParseChat(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_completion_tokens":3}`,
		`{"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]}`,
		`{"messages":[{"role":"user","content":null}]}`, `{"messages":[{"role":"","content":"x"}]}`,
		`{"messages":"x"}`, `{"messages":[1]}`, `{"messages":[{"role":"user","content":5}]}`, `{"n":3,"messages":[]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := parseChat(body)
		checkParsed(t, r, err)
	})
}

func FuzzParseFaults(f *testing.F) {
	for _, s := range []string{"429", "500,503", "invalid", "drop-after=3", "stall=1s", "stall=1s,drop-after=2", " , ", "stall=9999999h"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		fl, err := ParseFaults(s)
		if err != nil {
			return
		}
		if fl.DropAfter < 0 || fl.Stall < 0 || fl.Stall > maxFaultStall || (fl.Status != 0 && fl.Status != 400 && fl.Status != 429 && fl.Status != 500 && fl.Status != 503) {
			t.Fatalf("ParseFaults(%q) = %+v", s, fl)
		}
	})
}
