package server_test

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/llmesh/llmesh/api/llmv1"
	"github.com/llmesh/llmesh/api/vllmpb"
	"github.com/llmesh/llmesh/sim"
	"github.com/llmesh/llmesh/sim/server"
	"github.com/llmesh/llmesh/sim/simtest"
	"github.com/llmesh/llmesh/testkit/wait"
)

func dial(t *testing.T, s *simtest.Sim) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(s.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func checkTrailer(t *testing.T, md metadata.MD) {
	t.Helper()
	get := func(k string) int64 {
		v := md.Get(k)
		if len(v) != 1 {
			t.Fatalf("trailer %s: %v", k, v)
		}
		n, err := strconv.ParseInt(v[0], 10, 64)
		if err != nil {
			t.Fatalf("trailer %s: %v", k, err)
		}
		return n
	}
	truth{
		ArrivalNs: get(server.TrailerArrival), FirstScheduledNs: get(server.TrailerFirstScheduled),
		FirstTokenNs: get(server.TrailerFirstToken), FinishNs: get(server.TrailerFinish), Preemptions: int(get(server.TrailerPreemptions)),
	}.check(t)
}

func TestGRPCGeneration(t *testing.T) {
	s := simtest.Start(t, simtest.WithTimeScale(testScale))
	c := llmv1.NewGenerationClient(dial(t, s))
	ctx := context.Background()
	st, err := c.Generate(ctx, &llmv1.GenerateRequest{Model: s.Model, Prompt: "the quick brown fox", MaxTokens: 6, Sampling: &llmv1.SamplingParams{Seed: ptr(int32(7))}})
	if err != nil {
		t.Fatal(err)
	}
	var ids []uint32
	var text strings.Builder
	var final *llmv1.GenerateResponse
	msgs := 0
	for {
		r, err := st.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		msgs++
		ids = append(ids, r.TokenIds...)
		text.WriteString(r.Text)
		if r.FinishReason != "" {
			final = r
		}
	}
	// One message per engine step, the steps a lagging handler missed in
	// one: 6 tokens in 1 to 6 messages.
	if len(ids) != 6 || msgs < 1 || msgs > 6 || sim.Detokenize(ids) != text.String() {
		t.Errorf("%d messages, ids %v, text %q", msgs, ids, text.String())
	}
	if final == nil || final.FinishReason != "length" || final.Usage.GetCompletionTokens() != 6 || final.Usage.GetPromptTokens() != 4 {
		t.Errorf("final %v", final)
	}
	checkTrailer(t, st.Trailer())

	// Continuation by ids gives the same next tokens, over both services.
	cont := append(sim.Tokenize("the quick brown fox"), ids[:2]...)
	st, err = c.Generate(ctx, &llmv1.GenerateRequest{PromptTokenIds: cont, MaxTokens: 4, Sampling: &llmv1.SamplingParams{Seed: ptr(int32(7))}})
	if err != nil {
		t.Fatal(err)
	}
	var rest []uint32
	for {
		r, err := st.Recv()
		if err != nil {
			break
		}
		rest = append(rest, r.TokenIds...)
	}
	if sim.Detokenize(rest) != sim.Detokenize(ids[2:]) {
		t.Errorf("continuation %v, want %v", rest, ids[2:])
	}

	// Errors map to codes.
	for _, tc := range []struct {
		req  *llmv1.GenerateRequest
		md   string
		code codes.Code
	}{
		{&llmv1.GenerateRequest{Model: "nope", Prompt: "a"}, "", codes.NotFound},
		{&llmv1.GenerateRequest{Prompt: ""}, "", codes.InvalidArgument},
		{&llmv1.GenerateRequest{PromptTokenIds: []uint32{sim.VocabSize}}, "", codes.InvalidArgument},
		{&llmv1.GenerateRequest{Prompt: "a"}, "429", codes.ResourceExhausted},
		{&llmv1.GenerateRequest{Prompt: "a"}, "503", codes.Unavailable},
		{&llmv1.GenerateRequest{Prompt: "a"}, "500", codes.Internal},
		{&llmv1.GenerateRequest{Prompt: "a", MaxTokens: 10}, "drop-after=2", codes.Unavailable},
	} {
		cctx := ctx
		if tc.md != "" {
			cctx = metadata.AppendToOutgoingContext(ctx, server.FaultHeader, tc.md)
		}
		st, err := c.Generate(cctx, tc.req)
		if err == nil {
			for err == nil {
				_, err = st.Recv()
			}
		}
		if status.Code(err) != tc.code {
			t.Errorf("%v with fault %q: %v, want %v", tc.req, tc.md, err, tc.code)
		}
	}
}

func ptr[T any](v T) *T { return &v }

func TestGRPCVllmEngine(t *testing.T) {
	s := simtest.Start(t, simtest.WithTimeScale(testScale))
	c := vllmpb.NewVllmEngineClient(dial(t, s))
	ctx := context.Background()
	for _, stream := range []bool{true, false} {
		st, err := c.Generate(ctx, &vllmpb.GenerateRequest{
			RequestId:      "r1",
			Input:          &vllmpb.GenerateRequest_Tokenized{Tokenized: &vllmpb.TokenizedInput{InputIds: []uint32{1, 2, 3, 4, 5}}},
			SamplingParams: &vllmpb.SamplingParams{MaxTokens: ptr(uint32(5))},
			Stream:         stream,
		})
		if err != nil {
			t.Fatal(err)
		}
		var chunkIDs []uint32
		var done *vllmpb.GenerateComplete
		chunks := 0
		for {
			r, err := st.Recv()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if ch := r.GetChunk(); ch != nil {
				chunks++
				chunkIDs = append(chunkIDs, ch.TokenIds...)
				if ch.PromptTokens != 5 || int(ch.CompletionTokens) != len(chunkIDs) {
					t.Errorf("chunk counts %v after %d ids", ch, len(chunkIDs))
				}
			}
			if cp := r.GetComplete(); cp != nil {
				done = cp
			}
		}
		if done == nil || len(done.OutputIds) != 5 || done.FinishReason != "length" || done.CompletionTokens != 5 || done.PromptTokens != 5 {
			t.Fatalf("stream=%v: complete %v", stream, done)
		}
		// One chunk per engine step; a handler that falls behind the
		// (time-scaled) engine sends the steps it missed as one chunk, so
		// 5 tokens come in 1 to 5 chunks, each counting every id so far.
		if stream && (chunks < 1 || chunks > 5 || sim.Detokenize(chunkIDs) != sim.Detokenize(done.OutputIds)) {
			t.Errorf("stream: %d chunks with %v, complete %v", chunks, chunkIDs, done.OutputIds)
		}
		if !stream && chunks != 0 {
			t.Errorf("non-streaming sent %d chunks", chunks)
		}
		checkTrailer(t, st.Trailer())
	}
	// Text input counts words; a missing input is a named error.
	st, err := c.Generate(ctx, &vllmpb.GenerateRequest{Input: &vllmpb.GenerateRequest_Text{Text: "relocated prompt of six words"}, SamplingParams: &vllmpb.SamplingParams{MaxTokens: ptr(uint32(1))}})
	if err != nil {
		t.Fatal(err)
	}
	var prompt uint32
	for {
		r, err := st.Recv()
		if err != nil {
			break
		}
		if cp := r.GetComplete(); cp != nil {
			prompt = cp.PromptTokens
		}
	}
	if prompt != 5 {
		t.Errorf("text prompt counted %d tokens, want 5", prompt)
	}
	st, _ = c.Generate(ctx, &vllmpb.GenerateRequest{})
	if _, err := st.Recv(); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "input") {
		t.Errorf("missing input: %v", err)
	}
}

// metric reads one unlabelled-by-us series value from /metrics.
func metric(t *testing.T, s *simtest.Sim, name string) float64 {
	t.Helper()
	resp, err := http.Get(s.HTTPURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, name+"{") || strings.HasPrefix(line, name+" ") {
			f := strings.Fields(line)
			v, err := strconv.ParseFloat(f[len(f)-1], 64)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	t.Fatalf("metric %s missing", name)
	return 0
}

func TestAbortFreesSequence(t *testing.T) {
	s := simtest.Start(t, simtest.WithTimeScale(testScale))
	// gRPC cancel.
	c := llmv1.NewGenerationClient(dial(t, s))
	ctx, cancel := context.WithCancel(context.Background())
	st, err := c.Generate(ctx, &llmv1.GenerateRequest{Prompt: strings.Repeat("w ", 2000), MaxTokens: 100000})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatal(err)
	}
	if metric(t, s, "vllm:num_requests_running") != 1 || metric(t, s, "vllm:kv_cache_usage_perc") == 0 {
		t.Fatal("sequence not running with KV blocks")
	}
	cancel()
	wait.Until(t, "grpc abort", func() bool {
		return metric(t, s, "vllm:num_requests_running") == 0 && metric(t, s, "vllm:kv_cache_usage_perc") == 0
	})
	// HTTP disconnect.
	hctx, hcancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(hctx, http.MethodPost, s.HTTPURL+"/v1/completions", strings.NewReader(`{"prompt":"a b c","max_tokens":100000,"stream":true}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	if _, err := resp.Body.Read(buf); err != nil {
		t.Fatal(err)
	}
	hcancel()
	resp.Body.Close()
	wait.Until(t, "http abort", func() bool {
		return metric(t, s, "vllm:num_requests_running") == 0 && metric(t, s, "vllm:kv_cache_usage_perc") == 0
	})
	if got := metric(t, s, "llmesh_sim:requests_aborted_total"); got != 2 {
		t.Errorf("aborted %v, want 2", got)
	}
}

func TestMetricsAndPriorityPreemption(t *testing.T) {
	// A small cache under the priority policy: long low-priority streams
	// get preempted by a high-priority one, and /metrics shows it. The
	// prompts repeat one word, so prefix caching is off: shared blocks
	// would leave no pressure.
	s := simtest.Start(t, simtest.WithTimeScale(10), simtest.WithEngine(sim.Config{KVCacheTokens: 1024, Policy: sim.Priority, DisablePrefixCaching: true}))
	c := llmv1.NewGenerationClient(dial(t, s))
	ctx := context.Background()
	type out struct {
		md  metadata.MD
		err error
	}
	run := func(prio int32, prompt, max int) chan out {
		ch := make(chan out, 1)
		go func() {
			st, err := c.Generate(ctx, &llmv1.GenerateRequest{Prompt: strings.Repeat("w ", prompt), MaxTokens: uint32(max), Priority: prio})
			if err != nil {
				ch <- out{err: err}
				return
			}
			for err == nil {
				_, err = st.Recv()
			}
			if err == io.EOF {
				err = nil
			}
			ch <- out{st.Trailer(), err}
		}()
		return ch
	}
	// Alone the two low ones fit (2 x 450 tokens); with the high one they
	// do not (1350 > 1024).
	low := []chan out{run(10, 200, 250), run(10, 200, 250)}
	wait.Until(t, "low-priority streams running", func() bool { return metric(t, s, "vllm:num_requests_running") == 2 })
	high := run(0, 300, 150)
	hi := <-high
	if hi.err != nil {
		t.Fatal(hi.err)
	}
	if hi.md.Get(server.TrailerPreemptions)[0] != "0" {
		t.Errorf("high-priority stream preempted: %v", hi.md)
	}
	lowPre := 0
	for _, ch := range low {
		o := <-ch
		if o.err != nil {
			t.Fatal(o.err)
		}
		n, _ := strconv.Atoi(o.md.Get(server.TrailerPreemptions)[0])
		lowPre += n
	}
	if lowPre == 0 {
		t.Error("no low-priority preemption")
	}
	if got := metric(t, s, "vllm:num_preemptions_total"); int(got) != lowPre {
		t.Errorf("vllm:num_preemptions_total %v, trailers say %d", got, lowPre)
	}
	for _, name := range []string{"vllm:num_requests_waiting", "vllm:time_to_first_token_seconds_count", "vllm:inter_token_latency_seconds_count",
		"vllm:e2e_request_latency_seconds_count", "vllm:request_queue_time_seconds_count", "vllm:prompt_tokens_total", "vllm:generation_tokens_total"} {
		metric(t, s, name)
	}
	if got := metric(t, s, "vllm:generation_tokens_total"); got != 650 {
		t.Errorf("generation tokens %v, want 650", got)
	}
}
