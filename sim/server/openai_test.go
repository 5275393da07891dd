package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"go.uber.org/goleak"

	"github.com/llmesh/llmesh/sim"
	"github.com/llmesh/llmesh/sim/server"
	"github.com/llmesh/llmesh/sim/simtest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testScale keeps engine steps (7-60 ms) at a few real milliseconds.
const testScale = 20

type truth struct {
	ArrivalNs        int64 `json:"arrival_ns"`
	FirstScheduledNs int64 `json:"first_scheduled_ns"`
	FirstTokenNs     int64 `json:"first_token_ns"`
	FinishNs         int64 `json:"finish_ns"`
	Preemptions      int   `json:"preemptions"`
}

func (tr truth) check(t *testing.T) {
	t.Helper()
	if tr.ArrivalNs == 0 || tr.ArrivalNs > tr.FirstScheduledNs || tr.FirstScheduledNs >= tr.FirstTokenNs || tr.FirstTokenNs > tr.FinishNs {
		t.Errorf("engine truth out of order: %+v", tr)
	}
}

func engineTruth(t *testing.T, raw string) truth {
	t.Helper()
	var v struct {
		E *truth `json:"llmesh_engine"`
	}
	if err := json.Unmarshal([]byte(raw), &v); err != nil || v.E == nil {
		t.Fatalf("no llmesh_engine in %s (%v)", raw, err)
	}
	return *v.E
}

func newClient(s *simtest.Sim) openai.Client {
	return openai.NewClient(option.WithBaseURL(s.HTTPURL+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
}

func words(n int, prefix string) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "%s%d ", prefix, i)
	}
	return b.String()
}

func TestOpenAIClientStreamingCompletions(t *testing.T) {
	s := simtest.Start(t, simtest.WithTimeScale(testScale))
	c := newClient(s)
	ctx := context.Background()
	st := c.Completions.NewStreaming(ctx, openai.CompletionNewParams{
		Model:         openai.CompletionNewParamsModel(s.Model),
		Prompt:        openai.CompletionNewParamsPromptUnion{OfString: openai.String(words(100, "w"))},
		MaxTokens:     openai.Int(8),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	})
	var text strings.Builder
	var tokenChunks int
	var usage openai.CompletionUsage
	var last string
	for st.Next() {
		ch := st.Current()
		for _, c := range ch.Choices {
			if c.Text != "" {
				tokenChunks++
				text.WriteString(c.Text)
			}
		}
		if ch.Usage.TotalTokens > 0 {
			usage = ch.Usage
		}
		last = ch.RawJSON()
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	if tokenChunks != 8 || len(strings.Fields(text.String())) != 8 {
		t.Errorf("got %d token chunks, text %q; want 8 chunks of one word", tokenChunks, text.String())
	}
	if usage.PromptTokens != 100 || usage.CompletionTokens != 8 {
		t.Errorf("usage %+v, want 100 prompt and 8 completion tokens", usage)
	}
	engineTruth(t, last).check(t)
}

func TestOpenAIClientStreamingChat(t *testing.T) {
	s := simtest.Start(t, simtest.WithTimeScale(testScale))
	c := newClient(s)
	st := c.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
		Model:         s.Model,
		Messages:      []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("be brief"), openai.UserMessage("tell me a story")},
		MaxTokens:     openai.Int(5),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	})
	var acc openai.ChatCompletionAccumulator
	var finish, last string
	roleOnly := 0
	for st.Next() {
		ch := st.Current()
		acc.AddChunk(ch)
		for _, c := range ch.Choices {
			if c.Delta.Content == "" && c.Delta.Role == "assistant" {
				roleOnly++
			}
			if c.FinishReason != "" {
				finish = c.FinishReason
			}
		}
		last = ch.RawJSON()
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	if roleOnly != 1 {
		t.Errorf("%d role-only chunks, want 1 first", roleOnly)
	}
	got := acc.Choices[0].Message.Content
	if len(strings.Fields(got)) != 5 || finish != "length" {
		t.Errorf("content %q finish %q, want 5 words and length", got, finish)
	}
	if acc.Usage.PromptTokens != 6 || acc.Usage.CompletionTokens != 5 {
		t.Errorf("usage %+v, want 6 prompt (content words only) and 5 completion tokens", acc.Usage)
	}
	engineTruth(t, last).check(t)
}

func TestOpenAIClientNonStreaming(t *testing.T) {
	s := simtest.Start(t, simtest.WithTimeScale(testScale))
	c := newClient(s)
	ctx := context.Background()
	cmp, err := c.Completions.New(ctx, openai.CompletionNewParams{
		Model:     openai.CompletionNewParamsModel(s.Model),
		Prompt:    openai.CompletionNewParamsPromptUnion{OfArrayOfTokens: []int64{1, 2, 3}},
		MaxTokens: openai.Int(4),
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(strings.Fields(cmp.Choices[0].Text)); n != 4 || cmp.Usage.PromptTokens != 3 {
		t.Errorf("text %q usage %+v, want 4 words and 3 prompt tokens", cmp.Choices[0].Text, cmp.Usage)
	}
	engineTruth(t, cmp.RawJSON()).check(t)
	chat, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(strings.Fields(chat.Choices[0].Message.Content)); n != 16 || chat.Model != s.Model {
		t.Errorf("default chat: %d words from model %q, want 16 (default max_tokens) from %q", n, chat.Model, s.Model)
	}
}

// complete runs a non-streaming completion and returns its text.
func complete(t *testing.T, c openai.Client, model string, prompt openai.CompletionNewParamsPromptUnion, max int64) string {
	t.Helper()
	r, err := c.Completions.New(context.Background(), openai.CompletionNewParams{
		Model: openai.CompletionNewParamsModel(model), Prompt: prompt, MaxTokens: openai.Int(max), Seed: openai.Int(7),
	})
	if err != nil {
		t.Fatal(err)
	}
	return r.Choices[0].Text
}

func TestContinuationYieldsTheSameTokens(t *testing.T) {
	s := simtest.Start(t, simtest.WithTimeScale(testScale))
	c := newClient(s)
	prompt := "the quick brown fox"
	full := strings.Fields(complete(t, c, s.Model, openai.CompletionNewParamsPromptUnion{OfString: openai.String(prompt)}, 12))
	if len(full) != 12 {
		t.Fatalf("got %d words", len(full))
	}
	for _, cut := range []int{1, 3, 7, 11} {
		// As text: prompt + generated text.
		cont := prompt + " " + strings.Join(full[:cut], " ")
		rest := strings.Fields(complete(t, c, s.Model, openai.CompletionNewParamsPromptUnion{OfString: openai.String(cont)}, int64(12-cut)))
		if strings.Join(rest, " ") != strings.Join(full[cut:], " ") {
			t.Errorf("text continuation after %d: %v, want %v", cut, rest, full[cut:])
		}
		// As ids: prompt ids + generated ids.
		var ids []int64
		for _, id := range sim.Tokenize(cont) {
			ids = append(ids, int64(id))
		}
		rest = strings.Fields(complete(t, c, s.Model, openai.CompletionNewParamsPromptUnion{OfArrayOfTokens: ids}, int64(12-cut)))
		if strings.Join(rest, " ") != strings.Join(full[cut:], " ") {
			t.Errorf("id continuation after %d: %v, want %v", cut, rest, full[cut:])
		}
	}
	// Chat: an appended assistant message continues the same sequence.
	ctx := context.Background()
	chat := func(msgs ...openai.ChatCompletionMessageParamUnion) []string {
		r, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: s.Model, Messages: msgs, MaxTokens: openai.Int(int64(12 - 5*(len(msgs)-1))), Seed: openai.Int(7)})
		if err != nil {
			t.Fatal(err)
		}
		return strings.Fields(r.Choices[0].Message.Content)
	}
	whole := chat(openai.UserMessage(prompt))
	rest := chat(openai.UserMessage(prompt), openai.AssistantMessage(strings.Join(whole[:5], " ")))
	if strings.Join(rest, " ") != strings.Join(whole[5:], " ") || strings.Join(whole, " ") != strings.Join(full, " ") {
		t.Errorf("chat continuation %v, want %v (whole %v, completion %v)", rest, whole[5:], whole, full)
	}
}

// rawPost posts body and returns the status, headers and body.
func rawPost(t *testing.T, url, body string, hdr map[string]string) (int, http.Header, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

func TestBadInput(t *testing.T) {
	s := simtest.Start(t, simtest.WithTimeScale(testScale), simtest.WithEngine(sim.Config{MaxModelLen: 64}))
	cases := []struct {
		name, path, body string
		status           int
		param            any
	}{
		{"malformed json", "/v1/completions", `{"prompt": "a",`, 400, nil},
		{"trailing data", "/v1/completions", `{"prompt": "a"} {}`, 400, nil},
		{"wrong type", "/v1/completions", `{"prompt": "a", "max_tokens": "ten"}`, 400, "max_tokens"},
		{"unknown model", "/v1/completions", `{"model": "gpt-9", "prompt": "a"}`, 404, "model"},
		{"missing prompt", "/v1/completions", `{"max_tokens": 3}`, 400, "prompt"},
		{"empty prompt", "/v1/completions", `{"prompt": "   "}`, 400, "prompt"},
		{"prompt too long", "/v1/completions", `{"prompt": "` + words(64, "x") + `"}`, 400, "prompt"},
		{"prompt + max_tokens too long", "/v1/completions", `{"prompt": "a b", "max_tokens": 63}`, 400, "max_tokens"},
		{"bad token id", "/v1/completions", `{"prompt": [1, -2]}`, 400, "prompt"},
		{"batched prompts", "/v1/completions", `{"prompt": ["a", "b"]}`, 400, "prompt"},
		{"zero max tokens", "/v1/completions", `{"prompt": "a", "max_tokens": 0}`, 400, "max_tokens"},
		{"n", "/v1/completions", `{"prompt": "a", "n": 2}`, 400, "n"},
		{"no messages", "/v1/chat/completions", `{"messages": []}`, 400, "messages"},
		{"image part", "/v1/chat/completions", `{"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}`, 400, "messages[0].content[0].type"},
		{"missing role", "/v1/chat/completions", `{"messages": [{"content": "a"}]}`, 400, "messages[0].role"},
		{"stream_options without stream", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "a"}], "stream_options": {"include_usage": true}}`, 400, "stream_options"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, _, body := rawPost(t, s.HTTPURL+tc.path, tc.body, nil)
			if code != tc.status {
				t.Errorf("status %d, want %d (body %s)", code, tc.status, body)
			}
			var e struct {
				Error *struct {
					Message string `json:"message"`
					Type    string `json:"type"`
					Param   any    `json:"param"`
					Code    any    `json:"code"`
				} `json:"error"`
			}
			if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error == nil || e.Error.Message == "" || e.Error.Type == "" {
				t.Fatalf("not an OpenAI error object: %s", body)
			}
			if e.Error.Param != tc.param {
				t.Errorf("param %v, want %v", e.Error.Param, tc.param)
			}
		})
	}
	// The server still works afterwards.
	if code, _, body := rawPost(t, s.HTTPURL+"/v1/completions", `{"prompt": "a", "max_tokens": 2}`, nil); code != 200 {
		t.Fatalf("after bad input: %d %s", code, body)
	}
}

func TestFaultStatusesAndModels(t *testing.T) {
	s := simtest.Start(t, simtest.WithTimeScale(testScale))
	for _, tc := range []struct {
		fault  string
		status int
	}{{"429", 429}, {"500", 500}, {"503", 503}, {"invalid", 400}, {"bogus", 400}} {
		code, hdr, body := rawPost(t, s.HTTPURL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"a"}],"stream":true}`, map[string]string{server.FaultHeader: tc.fault})
		if code != tc.status || !strings.Contains(body, `"error"`) {
			t.Errorf("fault %s: status %d body %s, want %d with an error object", tc.fault, code, body, tc.status)
		}
		if (code == 429 || code == 503) && hdr.Get("Retry-After") == "" {
			t.Errorf("fault %s: no Retry-After", tc.fault)
		}
	}
	resp, err := http.Get(s.HTTPURL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var models struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&models); err != nil || len(models.Data) != 1 || models.Data[0].ID != s.Model {
		t.Errorf("models %+v (%v), want one %q", models, err, s.Model)
	}
}

func TestRandomFaultRate(t *testing.T) {
	s := simtest.Start(t, simtest.WithTimeScale(testScale), simtest.WithFaults(0.5, "503"), simtest.WithSeed(3))
	failed := 0
	for range 40 {
		code, _, _ := rawPost(t, s.HTTPURL+"/v1/completions", `{"prompt":"a","max_tokens":1}`, nil)
		switch code {
		case 503:
			failed++
		case 200:
		default:
			t.Fatalf("status %d", code)
		}
	}
	if failed < 8 || failed > 32 {
		t.Errorf("%d of 40 failed at rate 0.5", failed)
	}
}

// sseEvents reads SSE data payloads until EOF or error.
func sseEvents(r io.Reader) ([]string, error) {
	var out []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			out = append(out, d)
		}
	}
	return out, sc.Err()
}

func TestFaultDropMidStream(t *testing.T) {
	s := simtest.Start(t, simtest.WithTimeScale(testScale))
	req, _ := http.NewRequest(http.MethodPost, s.HTTPURL+"/v1/completions", strings.NewReader(`{"prompt":"a b c","max_tokens":20,"stream":true}`))
	req.Header.Set(server.FaultHeader, "drop-after=3")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	evs, err := sseEvents(resp.Body)
	if err == nil {
		t.Errorf("stream ended cleanly; want a broken connection")
	}
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Logf("read error: %v", err)
	}
	if len(evs) != 3 {
		t.Errorf("%d events before the drop, want 3: %v", len(evs), evs)
	}
}

func TestFaultStall(t *testing.T) {
	s := simtest.Start(t, simtest.WithTimeScale(testScale))
	req, _ := http.NewRequest(http.MethodPost, s.HTTPURL+"/v1/completions", strings.NewReader(`{"prompt":"a b c","max_tokens":30,"stream":true}`))
	req.Header.Set(server.FaultHeader, "stall=4s") // 200 ms real at scale 20
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	var gaps []time.Duration
	last := time.Time{}
	words := 0
	for sc.Scan() {
		d, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || d == "[DONE]" {
			continue
		}
		now := time.Now()
		if !last.IsZero() {
			gaps = append(gaps, now.Sub(last))
		}
		last = now
		var c struct {
			Choices []struct {
				Text string `json:"text"`
			} `json:"choices"`
		}
		_ = json.Unmarshal([]byte(d), &c)
		for _, ch := range c.Choices {
			words += len(strings.Fields(ch.Text))
		}
	}
	if len(gaps) == 0 || gaps[0] < 190*time.Millisecond {
		t.Errorf("gaps %v: want the first at least the stall (200 ms real)", gaps)
	}
	if words != 30 {
		t.Errorf("%d words after the stall, want all 30", words)
	}
}
