package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/llmesh/llmesh/api/llmv1"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/policy"
	"github.com/llmesh/llmesh/testkit/wait"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ctlAdmitter admits at once and lets a test decide when a lease is
// preempted: preemptAt(n) closes the lease's Preempt channel once the host
// reported n tokens. It counts releases per outcome, which is how the tests
// check exactly-once release.
type ctlAdmitter struct {
	mu        sync.Mutex
	admits    []scheduler.Request
	released  map[scheduler.Outcome]int
	leases    []*ctlLease
	preemptAt []int // per admission index; 0 = never; -1 = before the first token
}

type ctlLease struct {
	a        *ctlAdmitter
	pre      chan struct{}
	at       int
	once     sync.Once
	released atomic.Int32
}

func (a *ctlAdmitter) Admit(ctx context.Context, req scheduler.Request) (scheduler.Lease, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	i := len(a.admits)
	a.admits = append(a.admits, req)
	l := &ctlLease{a: a, pre: make(chan struct{})}
	if i < len(a.preemptAt) {
		l.at = a.preemptAt[i]
	}
	if l.at < 0 {
		l.fire()
	}
	a.leases = append(a.leases, l)
	return l, nil
}

func (l *ctlLease) fire()                    { l.once.Do(func() { close(l.pre) }) }
func (l *ctlLease) Preempt() <-chan struct{} { return l.pre }
func (l *ctlLease) QueueTime() time.Duration { return 0 }
func (l *ctlLease) Progress(p scheduler.Progress) {
	if l.at > 0 && p.Tokens >= l.at {
		l.fire()
	}
}
func (l *ctlLease) Release(o scheduler.Outcome) {
	if l.released.Add(1) != 1 {
		panic("lease released twice")
	}
	l.a.mu.Lock()
	if l.a.released == nil {
		l.a.released = map[scheduler.Outcome]int{}
	}
	l.a.released[o]++
	l.a.mu.Unlock()
}

func (a *ctlAdmitter) snapshot() ([]scheduler.Request, map[scheduler.Outcome]int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	r := map[scheduler.Outcome]int{}
	for k, v := range a.released {
		r[k] = v
	}
	return append([]scheduler.Request(nil), a.admits...), r
}

// detEngine is a deterministic OpenAI completions/chat upstream: token i
// of the output is a word chosen by a hash of the whole text before it,
// so a continuation request (prompt + text so far) produces exactly the
// tokens an uninterrupted run does. It honours max_tokens, include_usage,
// and vLLM's continue_final_message for chat.
type detEngine struct {
	gap      time.Duration
	requests atomic.Int32
}

func (e *detEngine) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e.requests.Add(1)
	var req struct {
		Prompt   string `json:"prompt"`
		Messages []struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"messages"`
		MaxTokens     int  `json:"max_tokens"`
		Continue      bool `json:"continue_final_message"`
		StreamOptions struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
	}
	b, _ := io.ReadAll(r.Body)
	if err := json.Unmarshal(b, &req); err != nil {
		http.Error(w, err.Error(), 400)
		return
	}
	chat := strings.HasSuffix(r.URL.Path, "/chat/completions")
	ctxText := req.Prompt
	if chat {
		for _, m := range req.Messages {
			ctxText += "|" + m.Role + ":" + m.Content
		}
		if !req.Continue {
			ctxText += "|assistant:"
		}
	}
	promptTokens := len(strings.Fields(ctxText))
	id := fmt.Sprintf("cmpl-%d", e.requests.Load())
	obj := "text_completion"
	if chat {
		obj = "chat.completion.chunk"
	}
	w.Header().Set("Content-Type", "text/event-stream")
	f := w.(http.Flusher)
	send := func(choice string, usage string) {
		fmt.Fprintf(w, `data: {"id":%q,"object":%q,"created":%d,"model":"det","choices":[%s]%s}`+"\n\n",
			id, obj, 1000+e.requests.Load(), choice, usage)
		f.Flush()
	}
	if chat {
		send(`{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}`, "")
	}
	words := []string{" alpha", " beta", " gamma", " delta", " eps", " zeta", " eta"}
	for i := 0; i < req.MaxTokens; i++ {
		select {
		case <-time.After(e.gap):
		case <-r.Context().Done():
			return
		}
		h := fnv.New32a()
		h.Write([]byte(ctxText))
		tok := words[h.Sum32()%uint32(len(words))]
		ctxText += tok
		if chat {
			send(fmt.Sprintf(`{"index":0,"delta":{"content":%q},"finish_reason":null}`, tok), "")
		} else {
			send(fmt.Sprintf(`{"index":0,"text":%q,"finish_reason":null}`, tok), "")
		}
	}
	if chat {
		send(`{"index":0,"delta":{},"finish_reason":"length"}`, "")
	} else {
		send(`{"index":0,"text":"","finish_reason":"length"}`, "")
	}
	if req.StreamOptions.IncludeUsage {
		send("", fmt.Sprintf(`,"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}`,
			promptTokens, req.MaxTokens, promptTokens+req.MaxTokens))
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}

// streamText concatenates the text of a stream's chunks and returns the
// ids seen and the final usage.
func streamText(t testing.TB, datas []string) (text string, ids map[string]bool, usage map[string]int) {
	t.Helper()
	ids = map[string]bool{}
	for _, d := range datas {
		if d == "[DONE]" {
			continue
		}
		var c struct {
			ID      string `json:"id"`
			Choices []struct {
				Text  string `json:"text"`
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
			Usage map[string]int `json:"usage"`
		}
		if err := json.Unmarshal([]byte(d), &c); err != nil {
			t.Fatalf("bad chunk %q: %v", d, err)
		}
		ids[c.ID] = true
		for _, ch := range c.Choices {
			text += ch.Text + ch.Delta.Content
		}
		if c.Usage != nil {
			usage = c.Usage
		}
	}
	return text, ids, usage
}

func TestMidStreamPreemptionSplicesContinuation(t *testing.T) {
	for _, tc := range []struct {
		name, path, body string
	}{
		{"completions", "/v1/completions", `{"model":"det","prompt":"once upon a time","max_tokens":12,"stream":true,"stream_options":{"include_usage":true}}`},
		{"chat", "/v1/chat/completions", `{"model":"det","messages":[{"role":"user","content":"tell me a story"}],"max_tokens":12,"stream":true,"stream_options":{"include_usage":true}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eng := &detEngine{gap: time.Millisecond}
			up := httptest.NewServer(eng)
			defer up.Close()

			// Reference: the same request, never preempted.
			_, plain := startGateway(t, Config{Pools: []Pool{{Name: "p", Upstream: up.URL}}})
			res := post(t, context.Background(), plain+tc.path, tc.body)
			want, _ := readSSE(t, res)
			res.Body.Close()
			wantText, _, wantUsage := streamText(t, want)

			adm := &ctlAdmitter{preemptAt: []int{4, 9}} // preempted twice mid-stream
			rec := newRecorder()
			_, gw := startGateway(t, Config{Pools: []Pool{{Name: "p", Upstream: up.URL}}}, WithAdmitter(adm), WithRecorder(rec))
			res = post(t, context.Background(), gw+tc.path, tc.body)
			got, events := readSSE(t, res)
			res.Body.Close()
			gotText, ids, gotUsage := streamText(t, got)
			if gotText != wantText {
				t.Errorf("spliced text %q, want %q", gotText, wantText)
			}
			if len(ids) != 1 {
				t.Errorf("chunk ids %v, want one id across the splice", ids)
			}
			if diff := cmp.Diff(wantUsage, gotUsage); diff != "" {
				t.Errorf("final usage (-want +got):\n%s", diff)
			}
			for i, e := range events {
				if e == "error" {
					t.Errorf("event %d is an error: %s", i, got[i])
				}
			}
			if got[len(got)-1] != "[DONE]" {
				t.Errorf("stream does not end with [DONE]: %q", got[len(got)-1])
			}
			admits, released := adm.snapshot()
			if len(admits) != 3 || !admits[1].Requeue || !admits[2].Requeue || admits[2].ID != admits[0].ID {
				t.Errorf("admissions %+v, want 3 with the requeues keeping the ID", admits)
			}
			if diff := cmp.Diff(map[scheduler.Outcome]int{scheduler.Preempted: 2, scheduler.Done: 1}, released); diff != "" {
				t.Errorf("releases (-want +got):\n%s", diff)
			}
			r := rec.next(t)
			if !r.OK() || r.Preemptions != 2 || r.OutputTokens != 12 {
				t.Errorf("record ok=%v err=%q preemptions=%d tokens=%d", r.OK(), r.Error, r.Preemptions, r.OutputTokens)
			}
		})
	}
}

func TestPreemptionBeforeFirstByteRequeues(t *testing.T) {
	eng := &detEngine{gap: time.Millisecond}
	up := httptest.NewServer(eng)
	defer up.Close()
	adm := &ctlAdmitter{preemptAt: []int{-1}} // first admission is preempted at once
	_, gw := startGateway(t, Config{Pools: []Pool{{Name: "p", Upstream: up.URL}}}, WithAdmitter(adm))
	res := post(t, context.Background(), gw+"/v1/completions", `{"prompt":"a b","max_tokens":3,"stream":true}`)
	datas, events := readSSE(t, res)
	res.Body.Close()
	text, _, _ := streamText(t, datas)
	if len(strings.Fields(text)) != 3 || strings.Contains(strings.Join(events, ""), "error") {
		t.Fatalf("client saw %q %q, want a plain 3-token stream", events, datas)
	}
	admits, released := adm.snapshot()
	if len(admits) != 2 || !admits[1].Requeue {
		t.Errorf("admissions %+v, want the request requeued once", admits)
	}
	if diff := cmp.Diff(map[scheduler.Outcome]int{scheduler.Preempted: 1, scheduler.Done: 1}, released); diff != "" {
		t.Errorf("releases (-want +got):\n%s", diff)
	}
}

func TestGRPCMidStreamPreemptionEndsWithStatus(t *testing.T) {
	up := startGRPC(t, &genServer{n: 50, gap: time.Millisecond})
	adm := &ctlAdmitter{preemptAt: []int{3}}
	_, gw := startGateway(t, Config{Pools: []Pool{{Name: "g", Protocol: GRPC, Upstream: up}}}, WithAdmitter(adm))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := grpcClient(t, gw).Generate(ctx, &llmv1.GenerateRequest{Prompt: "x", MaxTokens: 50})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		if _, err = st.Recv(); err != nil {
			break
		}
		n++
	}
	if n < 3 || n >= 50 || status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "preempted") {
		t.Fatalf("got %d messages then %v, want ≥3 then UNAVAILABLE preempted", n, err)
	}
	_, released := adm.snapshot()
	if diff := cmp.Diff(map[scheduler.Outcome]int{scheduler.Preempted: 1}, released); diff != "" {
		t.Errorf("releases (-want +got):\n%s", diff)
	}
}

func TestNonSpliceablePreemptionEndsWithErrorEvent(t *testing.T) {
	eng := &detEngine{gap: time.Millisecond}
	up := httptest.NewServer(eng)
	defer up.Close()
	adm := &ctlAdmitter{preemptAt: []int{2}}
	rec := newRecorder()
	_, gw := startGateway(t, Config{Pools: []Pool{{Name: "p", Upstream: up.URL}}}, WithAdmitter(adm), WithRecorder(rec))
	// n=2 cannot be continued.
	res := post(t, context.Background(), gw+"/v1/completions", `{"prompt":"a","max_tokens":20,"stream":true,"n":2}`)
	datas, events := readSSE(t, res)
	res.Body.Close()
	if len(events) == 0 || events[len(events)-1] != "error" || !strings.Contains(datas[len(datas)-1], `"type":"preempted"`) {
		t.Fatalf("stream ended with %q %q, want a preempted error event", events, datas)
	}
	_, released := adm.snapshot()
	if diff := cmp.Diff(map[scheduler.Outcome]int{scheduler.Preempted: 1}, released); diff != "" {
		t.Errorf("releases (-want +got):\n%s", diff)
	}
	if r := rec.next(t); r.Outcome != scheduler.Preempted {
		t.Errorf("outcome %v, want preempted", r.Outcome)
	}
}

func TestAdmissionErrorsMapToStatus(t *testing.T) {
	fifo, err := policy.Lookup("fifo")
	if err != nil {
		t.Fatal(err)
	}
	sched, err := scheduler.New(scheduler.Config{
		Pools:   []scheduler.PoolConfig{{Name: "p", MaxInflight: 1, Policy: fifo}},
		Classes: []scheduler.ClassConfig{{Name: "default", MaxQueue: 1}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sched.Close()
	hold := make(chan struct{})
	started := make(chan struct{}, 4)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		select {
		case <-hold:
		case <-r.Context().Done():
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"choices":[{"text":"x"}]}`)
	}))
	defer up.Close()
	defer close(hold)
	rec := newRecorder()
	_, gw := startGateway(t, Config{Pools: []Pool{{Name: "p", Upstream: up.URL}}}, WithAdmitter(sched), WithRecorder(rec))

	// One in flight, one queued, the third is refused with 429.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 2)
	go func() {
		res, err := http.DefaultClient.Do(mustReq(ctx, gw+"/v1/completions", `{"prompt":"1"}`))
		if err == nil {
			res.Body.Close()
		}
		errc <- err
	}()
	<-started
	go func() {
		res, err := http.DefaultClient.Do(mustReq(ctx, gw+"/v1/completions", `{"prompt":"2"}`))
		if err == nil {
			res.Body.Close()
		}
		errc <- err
	}()
	wait.UntilNil(t, "the second request queued", func() error {
		if st := sched.Stats(); len(st) != 1 || st[0].Queued["default"] != 1 {
			return fmt.Errorf("stats %+v", st)
		}
		return nil
	})
	res := post(t, context.Background(), gw+"/v1/completions", `{"prompt":"3"}`)
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") == "" || !strings.Contains(string(b), "queue_full") {
		t.Errorf("third request: %d %q Retry-After=%q, want 429 queue_full with Retry-After", res.StatusCode, b, res.Header.Get("Retry-After"))
	}
	if r := rec.next(t); r.Err == nil {
		t.Error("refused request recorded without error")
	}
	cancel()
	first, second := <-errc, <-errc // wait for both servers; how they ended is not under test
	t.Logf("servers ended: %v, %v", first, second)
}

// TestPreemptionAtLastToken: a preemption that lands after the last token
// must not start a continuation that generates more; the client gets the
// same text and a clean end either way the race goes.
func TestPreemptionAtLastToken(t *testing.T) {
	eng := &detEngine{gap: time.Millisecond}
	up := httptest.NewServer(eng)
	defer up.Close()
	body := `{"model":"det","prompt":"last token","max_tokens":6,"stream":true}`
	_, plain := startGateway(t, Config{Pools: []Pool{{Name: "p", Upstream: up.URL}}})
	res := post(t, context.Background(), plain+"/v1/completions", body)
	want, _ := readSSE(t, res)
	res.Body.Close()
	wantText, _, _ := streamText(t, want)

	adm := &ctlAdmitter{preemptAt: []int{6}}
	_, gw := startGateway(t, Config{Pools: []Pool{{Name: "p", Upstream: up.URL}}}, WithAdmitter(adm))
	res = post(t, context.Background(), gw+"/v1/completions", body)
	got, events := readSSE(t, res)
	res.Body.Close()
	gotText, _, _ := streamText(t, got)
	if gotText != wantText || got[len(got)-1] != "[DONE]" || strings.Contains(strings.Join(events, ","), "error") {
		t.Fatalf("got %q (events %q), want %q then [DONE]", got, events, wantText)
	}
	if admits, _ := adm.snapshot(); len(admits) != 1 {
		t.Errorf("%d admissions: a finished stream was continued", len(admits))
	}
}
