package gateway

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/llmesh/llmesh/api/llmv1"
	"github.com/llmesh/llmesh/api/vllmpb"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/policy"
	"github.com/llmesh/llmesh/sim/simtest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestSpliceAgainstSim preempts streams twice mid-way and checks that the
// client receives exactly the tokens and usage of an uninterrupted run
// (the sim's output is a deterministic function of the context).
//
// The sim runs in real time: preemption at token 11 must reach the gateway
// before the engine's remaining steps are out, and at the default 10×
// speed a loaded host sometimes delivered the last five tokens of the
// continuation together, before the preemption took effect.
func TestSpliceAgainstSim(t *testing.T) {
	s := simtest.Start(t, simtest.WithTimeScale(1))
	for _, tc := range []struct{ name, path, body string }{
		{"completions", "/v1/completions", `{"model":"` + s.Model + `","prompt":"the quick brown fox jumps over","max_tokens":16,"stream":true,"stream_options":{"include_usage":true}}`},
		{"chat", "/v1/chat/completions", `{"model":"` + s.Model + `","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"name six words"}],"max_tokens":16,"stream":true,"stream_options":{"include_usage":true}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := post(t, context.Background(), s.HTTPURL+tc.path, tc.body)
			want, _ := readSSE(t, res)
			res.Body.Close()
			wantText, _, wantUsage := streamText(t, want)
			if len(strings.Fields(wantText)) != 16 {
				t.Fatalf("reference run produced %q", wantText)
			}

			adm := &ctlAdmitter{preemptAt: []int{5, 11}}
			rec := newRecorder()
			_, gw := startGateway(t, Config{Pools: []Pool{{Name: "sim", Upstream: s.HTTPURL}}}, WithAdmitter(adm), WithRecorder(rec))
			res = post(t, context.Background(), gw+tc.path, tc.body)
			got, events := readSSE(t, res)
			res.Body.Close()
			gotText, ids, gotUsage := streamText(t, got)
			if gotText != wantText {
				t.Errorf("spliced text\n got %q\nwant %q", gotText, wantText)
			}
			if len(ids) != 1 {
				t.Errorf("ids %v, want one", ids)
			}
			if diff := cmp.Diff(wantUsage, gotUsage); diff != "" {
				t.Errorf("usage (-want +got):\n%s", diff)
			}
			for i, e := range events {
				if e == "error" {
					t.Fatalf("error event %d: %s", i, got[i])
				}
			}
			_, released := adm.snapshot()
			if diff := cmp.Diff(map[scheduler.Outcome]int{scheduler.Preempted: 2, scheduler.Done: 1}, released); diff != "" {
				t.Errorf("releases (-want +got):\n%s", diff)
			}
			r := rec.next(t)
			if !r.OK() || r.OutputTokens != 16 || r.Preemptions != 2 {
				t.Errorf("record ok=%v (%q) tokens=%d preemptions=%d", r.OK(), r.Error, r.OutputTokens, r.Preemptions)
			}
			if r.UpstreamTTFT <= 0 || r.UpstreamTTFT > r.TTFT {
				t.Errorf("upstream TTFT %v (TTFT %v): must be measured from the first attempt", r.UpstreamTTFT, r.TTFT)
			}
		})
	}
}

// fidelity sends n streamed requests through a gateway to a real-time sim
// and returns, per request, the gateway's upstream TTFT minus the engine's
// own arrival→first-token time.
func fidelity(t testing.TB, n int) []time.Duration {
	s := simtest.Start(t, simtest.WithTimeScale(1))
	rec := newRecorder()
	_, gw := startGateway(t, Config{Pools: []Pool{{Name: "sim", Upstream: s.HTTPURL}}}, WithRecorder(rec))
	var diffs []time.Duration
	for i := 0; i < n; i++ {
		body := `{"model":"` + s.Model + `","prompt":"fidelity run ` + strconv.Itoa(i) + `","max_tokens":4,"stream":true,"stream_options":{"include_usage":true}}`
		res := post(t, context.Background(), gw+"/v1/completions", body)
		datas, _ := readSSE(t, res)
		res.Body.Close()
		_, _, usage := streamText(t, datas)
		r := rec.next(t)
		if !r.OK() || !r.Engine.Seen || r.Engine.FirstToken.IsZero() {
			t.Fatalf("request %d: ok=%v (%q) engine=%+v", i, r.OK(), r.Error, r.Engine)
		}
		if r.OutputTokens != usage["completion_tokens"] || r.CountedTokens != r.OutputTokens {
			t.Fatalf("request %d: gateway counted %d (usage %d), client usage %d", i, r.CountedTokens, r.OutputTokens, usage["completion_tokens"])
		}
		diffs = append(diffs, r.UpstreamTTFT-r.Engine.FirstToken.Sub(r.Engine.Arrival))
	}
	sort.Slice(diffs, func(i, j int) bool { return diffs[i] < diffs[j] })
	return diffs
}

func pct(d []time.Duration, p float64) time.Duration {
	return d[min(len(d)-1, int(p*float64(len(d))))]
}

// TestUpstreamTTFTFidelity checks that the gateway's upstream TTFT is the
// engine's own TTFT plus transport time (never less), with equal token
// counts. BenchmarkFidelity reports the p50/p99 difference.
func TestUpstreamTTFTFidelity(t *testing.T) {
	d := fidelity(t, 20)
	t.Logf("upstream TTFT − engine TTFT over %d requests: min %v p50 %v p99 %v", len(d), d[0], pct(d, 0.5), pct(d, 0.99))
	if d[0] < -time.Millisecond {
		t.Errorf("gateway TTFT shorter than the engine's by %v: clocks or observation wrong", -d[0])
	}
}

// TestGRPCThroughSim streams llm.v1 through the gateway to the sim and
// checks tokens and the engine's trailers.
func TestGRPCThroughSim(t *testing.T) {
	s := simtest.Start(t)
	rec := newRecorder()
	_, gw := startGateway(t, Config{Pools: []Pool{{Name: "sim", Protocol: GRPC, Upstream: s.GRPCAddr}}}, WithRecorder(rec))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := grpcClient(t, gw).Generate(ctx, &llmv1.GenerateRequest{Model: s.Model, Prompt: "one two three", MaxTokens: 9})
	if err != nil {
		t.Fatal(err)
	}
	tokens := 0
	for {
		m, err := st.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("Recv: %v", err)
		}
		tokens += len(m.GetTokenIds())
	}
	if tokens != 9 || len(st.Trailer().Get("llmesh-engine-first-token-ns")) != 1 {
		t.Fatalf("tokens %d trailer %v", tokens, st.Trailer())
	}
	r := rec.next(t)
	if !r.OK() || r.OutputTokens != 9 || !r.Engine.Seen {
		t.Errorf("record ok=%v (%q) tokens=%d engine=%v", r.OK(), r.Error, r.OutputTokens, r.Engine.Seen)
	}
}

// TestSimFaultMidStream: the sim drops the connection after a few tokens;
// the client gets an OpenAI error event and the record says upstream reset.
func TestSimFaultMidStream(t *testing.T) {
	s := simtest.Start(t)
	rec := newRecorder()
	_, gw := startGateway(t, Config{Pools: []Pool{{Name: "sim", Upstream: s.HTTPURL}}}, WithRecorder(rec))
	req := mustReq(context.Background(), gw+"/v1/completions", `{"model":"`+s.Model+`","prompt":"a b","max_tokens":20,"stream":true}`)
	req.Header.Set("x-llmesh-sim-fault", "drop-after=3")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	datas, events := readSSE(t, res)
	res.Body.Close()
	if len(events) == 0 || events[len(events)-1] != "error" {
		t.Fatalf("events %q %q, want an error event last", events, datas)
	}
	if r := rec.next(t); r.OK() || r.TokenChunks != 3 {
		t.Errorf("record ok=%v kind=%v chunks=%d, want failure after 3 tokens", r.OK(), r.ErrorKind, r.TokenChunks)
	}
}

// TestPreemptiveSchedulerWithSim runs the real preemptive scheduler: a
// long batch stream holds the only slot, an interactive request arrives,
// the scheduler preempts the batch stream, the interactive one runs, and
// the batch stream is continued to exactly the text of an uninterrupted run.
func TestPreemptiveSchedulerWithSim(t *testing.T) {
	// At the default time scale the 300-token batch stream lasts about
	// 0.3 s, which a loaded machine can spend before the interactive request
	// reaches the scheduler; at 2 it lasts about 1.5 s.
	s := simtest.Start(t, simtest.WithTimeScale(2))
	pre, err := policy.Lookup("preemptive")
	if err != nil {
		t.Fatal(err)
	}
	sched, err := scheduler.New(scheduler.Config{
		Pools: []scheduler.PoolConfig{{Name: "sim", MaxInflight: 1, Policy: pre,
			Preemption: scheduler.PreemptionConfig{MinLowerInflight: 1, MaxPerRequest: 3}}},
		Classes: []scheduler.ClassConfig{
			{Name: "interactive", Priority: 0, TTFT: 200 * time.Millisecond},
			{Name: "batch", Priority: 10, TTFT: 30 * time.Second, TPOT: 100 * time.Millisecond, Preemptible: true},
		},
		DefaultClass: "interactive",
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sched.Close()
	rec := newRecorder()
	_, gw := startGateway(t, Config{
		Pools:  []Pool{{Name: "sim", Upstream: s.HTTPURL}},
		Routes: []Route{{PathPrefix: "/v1/", Headers: map[string]string{"X-Lane": "batch"}, Pool: "sim", Class: "batch"}, {PathPrefix: "/v1/", Pool: "sim", Class: "interactive"}},
	}, WithAdmitter(sched), WithRecorder(rec))

	batchBody := `{"model":"` + s.Model + `","prompt":"summarise the quarterly report","max_tokens":300,"stream":true,"stream_options":{"include_usage":true}}`
	res := post(t, context.Background(), s.HTTPURL+"/v1/completions", batchBody)
	want, _ := readSSE(t, res)
	res.Body.Close()
	wantText, _, wantUsage := streamText(t, want)

	req := mustReq(context.Background(), gw+"/v1/completions", batchBody)
	req.Header.Set("X-Lane", "batch")
	batch, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer batch.Body.Close()
	// Read the first events so the batch stream is mid-way when the
	// interactive request arrives.
	br := bufio.NewReader(batch.Body)
	var head strings.Builder
	for events := 0; events < 3; {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("batch stream: %v", err)
		}
		head.WriteString(line)
		if line == "\n" {
			events++
		}
	}
	ires := post(t, context.Background(), gw+"/v1/completions", `{"model":"`+s.Model+`","prompt":"quick question","max_tokens":4,"stream":true}`)
	idatas, _ := readSSE(t, ires)
	ires.Body.Close()
	if itext, _, _ := streamText(t, idatas); len(strings.Fields(itext)) != 4 {
		t.Fatalf("interactive stream: %q", idatas)
	}
	interactive := rec.next(t)
	if interactive.Class != "interactive" || !interactive.OK() {
		t.Fatalf("first record %+v, want the interactive request, finished while the batch stream was preempted", interactive.Class)
	}

	rest, err := io.ReadAll(br)
	if err != nil {
		t.Fatal(err)
	}
	got, events := readSSE(t, &http.Response{Body: io.NopCloser(strings.NewReader(head.String() + string(rest)))})
	for i, e := range events {
		if e == "error" {
			t.Fatalf("batch stream error event: %s", got[i])
		}
	}
	gotText, ids, gotUsage := streamText(t, got)
	if gotText != wantText || len(ids) != 1 {
		t.Errorf("batch text equal=%v ids=%v", gotText == wantText, ids)
	}
	if diff := cmp.Diff(wantUsage, gotUsage); diff != "" {
		t.Errorf("batch usage (-want +got):\n%s", diff)
	}
	b := rec.next(t)
	if b.Class != "batch" || !b.OK() || b.Preemptions < 1 || b.OutputTokens != 300 {
		t.Errorf("batch record class=%s ok=%v (%q) preemptions=%d tokens=%d", b.Class, b.OK(), b.Error, b.Preemptions, b.OutputTokens)
	}
	if st := sched.Stats(); st[0].InFlight != 0 {
		t.Errorf("capacity leaked: %+v", st[0])
	}
}

// TestVLLMEngineGRPCThroughSim streams vLLM's engine API through the
// gateway: the chunk/complete messages are counted and the engine trailers
// pass.
func TestVLLMEngineGRPCThroughSim(t *testing.T) {
	s := simtest.Start(t)
	rec := newRecorder()
	_, gw := startGateway(t, Config{Pools: []Pool{{Name: "sim", Protocol: GRPC, Upstream: s.GRPCAddr}}}, WithRecorder(rec))
	cc, err := grpc.NewClient(strings.TrimPrefix(gw, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	maxTokens := uint32(7)
	st, err := vllmpb.NewVllmEngineClient(cc).Generate(ctx, &vllmpb.GenerateRequest{RequestId: "r1",
		Input: &vllmpb.GenerateRequest_Text{Text: "alpha beta gamma"}, Stream: true,
		SamplingParams: &vllmpb.SamplingParams{MaxTokens: &maxTokens}})
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := st.Recv(); err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatalf("Recv: %v", err)
			}
			break
		}
	}
	r := rec.next(t)
	if !r.OK() || r.OutputTokens != 7 || !r.Engine.Seen {
		t.Errorf("record ok=%v (%q) tokens=%d engine=%v", r.OK(), r.Error, r.OutputTokens, r.Engine.Seen)
	}
}
