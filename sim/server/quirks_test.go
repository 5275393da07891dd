package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/llmesh/llmesh/api/llmv1"
	"github.com/llmesh/llmesh/api/vllmpb"
	"github.com/llmesh/llmesh/sim/server"
	"github.com/llmesh/llmesh/sim/simtest"
	"github.com/llmesh/llmesh/testkit/wait"
)

func TestParseQuirks(t *testing.T) {
	q, err := server.ParseQuirks([]string{" grpc-no-usage ,", ""})
	if err != nil || !q.Has(server.QuirkGRPCNoUsage) {
		t.Fatalf("ParseQuirks = %v, %v", q, err)
	}
	if q, err := server.ParseQuirks(nil); err != nil || q.Has(server.QuirkGRPCNoUsage) {
		t.Fatalf("ParseQuirks(nil) = %v, %v", q, err)
	}
	_, err = server.ParseQuirks([]string{"grpc-no-usage,no-such-thing,other"})
	if err == nil || !strings.Contains(err.Error(), `"no-such-thing"`) || !strings.Contains(err.Error(), `"other"`) ||
		!strings.Contains(err.Error(), "grpc-no-usage") {
		t.Fatalf("unknown quirk: err = %v, want both names and the known list", err)
	}
	if _, err := server.New(server.Config{Quirks: []string{"bogus"}}); err == nil || !strings.Contains(err.Error(), `quirks: quirk "bogus" unknown`) {
		t.Fatalf("server.New with an unknown quirk: %v", err)
	}
}

// TestQuirkGRPCNoUsage: with grpc-no-usage neither gRPC API reports token
// counts, but the tokens themselves still stream.
func TestQuirkGRPCNoUsage(t *testing.T) {
	s := simtest.Start(t, simtest.WithTimeScale(testScale), simtest.WithConfig(func(c *server.Config) {
		c.Quirks = []string{string(server.QuirkGRPCNoUsage)}
	}))
	conn := dial(t, s)
	ctx := context.Background()

	st, err := llmv1.NewGenerationClient(conn).Generate(ctx, &llmv1.GenerateRequest{Model: s.Model, Prompt: "a b c", MaxTokens: 5})
	if err != nil {
		t.Fatal(err)
	}
	ids := 0
	for {
		r, err := st.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		ids += len(r.TokenIds)
		if r.Usage != nil {
			t.Errorf("llm.v1 message carries usage %v", r.Usage)
		}
	}
	if ids != 5 {
		t.Errorf("llm.v1: %d token ids, want 5", ids)
	}

	mt := uint32(5)
	vs, err := vllmpb.NewVllmEngineClient(conn).Generate(ctx, &vllmpb.GenerateRequest{
		Input: &vllmpb.GenerateRequest_Text{Text: "a b c"}, Stream: true, SamplingParams: &vllmpb.SamplingParams{MaxTokens: &mt},
	})
	if err != nil {
		t.Fatal(err)
	}
	ids = 0
	var done *vllmpb.GenerateComplete
	for {
		r, err := vs.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if ch := r.GetChunk(); ch != nil {
			ids += len(ch.TokenIds)
			if ch.PromptTokens != 0 || ch.CompletionTokens != 0 {
				t.Errorf("vLLM chunk carries counts %v", ch)
			}
		}
		if c := r.GetComplete(); c != nil {
			done = c
		}
	}
	if ids != 5 || done == nil || done.CompletionTokens != 0 || done.PromptTokens != 0 || len(done.OutputIds) != 5 {
		t.Errorf("vLLM: %d streamed ids, complete %v; want 5 ids and a complete without counts", ids, done)
	}
}

// streamEvents posts an SSE request and returns its data payloads; cut
// stops reading (and closes the connection) after that many events.
func streamEvents(t *testing.T, s *simtest.Sim, body string, header map[string]string, cut int) []string {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.HTTPURL+"/v1/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out []string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			out = append(out, d)
			if cut > 0 && len(out) >= cut {
				break
			}
		}
	}
	return out
}

func waitMetric(t *testing.T, s *simtest.Sim, name string, cond func(float64) bool) float64 {
	t.Helper()
	var v float64
	wait.UntilNil(t, name+" to meet its condition", func() error {
		if v = metric(t, s, name); !cond(v) {
			return fmt.Errorf("%s = %v", name, v)
		}
		return nil
	})
	return v
}

// TestQuirkNoAbort: without the quirk a request whose client went away is
// aborted; with it the engine generates all its tokens anyway.
func TestQuirkNoAbort(t *testing.T) {
	const n = 300
	body := `{"prompt":"a b c","max_tokens":300,"stream":true}`
	plain := simtest.Start(t, simtest.WithTimeScale(testScale))
	streamEvents(t, plain, body, nil, 2)
	waitMetric(t, plain, "llmesh_sim:requests_aborted_total", func(v float64) bool { return v == 1 })
	waitMetric(t, plain, "vllm:num_requests_running", func(v float64) bool { return v == 0 })
	if got := metric(t, plain, "vllm:generation_tokens_total"); got >= n {
		t.Errorf("without the quirk the engine generated %v tokens for a client gone after 2", got)
	}

	q := simtest.Start(t, simtest.WithTimeScale(testScale), simtest.WithConfig(func(c *server.Config) { c.Quirks = []string{"no-abort"} }))
	streamEvents(t, q, body, nil, 2)
	waitMetric(t, q, "vllm:generation_tokens_total", func(v float64) bool { return v == n })
	if got := metric(t, q, "llmesh_sim:requests_aborted_total"); got != 0 {
		t.Errorf("no-abort aborted %v requests", got)
	}
}

// TestQuirkMergeDeltas: tokens made during a stall go out as one event
// with the quirk (one per token without it); usage still says all of them.
func TestQuirkMergeDeltas(t *testing.T) {
	body := `{"prompt":"a b c","max_tokens":40,"stream":true,"stream_options":{"include_usage":true}}`
	stall := map[string]string{server.FaultHeader: "stall=300ms"}
	for _, merge := range []bool{false, true} {
		s := simtest.Start(t, simtest.WithTimeScale(testScale), simtest.WithConfig(func(c *server.Config) {
			if merge {
				c.Quirks = []string{"merge-deltas"}
			}
		}))
		events := streamEvents(t, s, body, stall, 0)
		tokens := 0
		for _, e := range events {
			if strings.Contains(e, `"text":"`) && !strings.Contains(e, `"text":""`) {
				tokens++
			}
		}
		if !strings.Contains(strings.Join(events, "\n"), `"completion_tokens":40`) {
			t.Fatalf("merge %v: no usage of 40 in %q", merge, events)
		}
		if merge && tokens >= 40 || !merge && tokens != 40 {
			t.Errorf("merge %v: %d token events for 40 tokens", merge, tokens)
		}
	}
}

// TestQuirkUsageWithoutStreamOptions: the usage event comes unasked.
func TestQuirkUsageWithoutStreamOptions(t *testing.T) {
	body := `{"prompt":"a b c","max_tokens":3,"stream":true}`
	for _, quirk := range []bool{false, true} {
		s := simtest.Start(t, simtest.WithTimeScale(testScale), simtest.WithConfig(func(c *server.Config) {
			if quirk {
				c.Quirks = []string{"usage-without-stream-options"}
			}
		}))
		got := strings.Contains(strings.Join(streamEvents(t, s, body, nil, 0), "\n"), `"usage"`)
		if got != quirk {
			t.Errorf("quirk %v: usage in the stream %v", quirk, got)
		}
	}
}

// TestQuirkRoleChunkFirst: streams open with an event without a token.
func TestQuirkRoleChunkFirst(t *testing.T) {
	s := simtest.Start(t, simtest.WithTimeScale(testScale), simtest.WithConfig(func(c *server.Config) { c.Quirks = []string{"role-chunk-first"} }))
	ev := streamEvents(t, s, `{"prompt":"a b c","max_tokens":3,"stream":true}`, nil, 0)
	if len(ev) < 5 || !strings.Contains(ev[0], `"text":""`) {
		t.Errorf("completion events %q, want an empty text first", ev)
	}
}

// TestQuirkNoContinueFinalMessage: a chat request ending in a partial
// assistant message is continued by default (the answer differs from the
// one to the context without it) and answered anew with the quirk (the
// same answer as without the partial message: the text repeats).
func TestQuirkNoContinueFinalMessage(t *testing.T) {
	answer := func(s *simtest.Sim, msgs string) string {
		t.Helper()
		resp, err := http.Post(s.HTTPURL+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"messages":`+msgs+`,"max_tokens":6,"continue_final_message":true,"add_generation_prompt":false}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out struct {
			Choices []struct {
				Message struct {
					Content string `json:"content"`
				} `json:"message"`
			} `json:"choices"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || len(out.Choices) != 1 {
			t.Fatalf("status %d, decode %v, %+v", resp.StatusCode, err, out)
		}
		return out.Choices[0].Message.Content
	}
	const user = `{"role":"user","content":"name six words"}`
	for _, tc := range []struct {
		quirks []string
		same   bool
	}{{nil, false}, {[]string{"no-continue-final-message"}, true}} {
		s := simtest.Start(t, simtest.WithTimeScale(testScale), simtest.WithConfig(func(c *server.Config) { c.Quirks = tc.quirks }))
		first := answer(s, `[`+user+`]`)
		partial, _ := json.Marshal(first)
		again := answer(s, `[`+user+`,{"role":"assistant","content":`+string(partial)+`}]`)
		if (again == first) != tc.same {
			t.Errorf("quirks %v: answer to the context %q, then with it as a final assistant message %q; same=%v, want %v",
				tc.quirks, first, again, again == first, tc.same)
		}
	}
}
