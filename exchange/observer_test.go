package exchange

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/llmesh/llmesh/scheduler"
)

var t0 = time.Unix(1_700_000_000, 0)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

// feed runs a whole response through a fresh observer: each piece arrives
// 10 ms after the previous one, starting at 100 ms.
func feed(t *testing.T, opts Options, contentType string, status int, pieces ...string) (Observation, []error) {
	t.Helper()
	o := NewObserver(opts)
	o.MarkReceived(at(0))
	o.MarkAdmitted(at(20))
	o.MarkUpstreamSent(at(25))
	o.ResponseHeaders(at(90), status, MapHeaders{"content-type": contentType})
	var errs []error
	for i, p := range pieces {
		if err := o.Observe(at(100+10*i), []byte(p)); err != nil {
			errs = append(errs, err)
		}
	}
	o.Finish(at(100+10*len(pieces)), nil)
	return o.Observation(), errs
}

func sseEvent(data string) string { return "data: " + data + "\n\n" }

func chatDelta(content string) string {
	return sseEvent(fmt.Sprintf(`{"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":%q},"finish_reason":null}]}`, content))
}

func TestObserveSSEChat(t *testing.T) {
	pieces := []string{
		sseEvent(`{"choices":[{"index":0,"delta":{"role":"assistant"}}]}`), // role-only: no token
		chatDelta("Hel"),
		chatDelta("lo"),
		chatDelta(""), // empty: no token
		chatDelta(" world"),
		sseEvent(`{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":null}`),
		sseEvent(`{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":4,"total_tokens":11},` +
			`"llmesh_engine":{"arrival_ns":1700000000030000000,"first_scheduled_ns":1700000000031000000,"first_token_ns":1700000000105000000,"finish_ns":1700000000160000000,"preemptions":1}}`),
		"data: [DONE]\n\n",
	}
	got, errs := feed(t, Options{KeepOutput: true}, "text/event-stream; charset=utf-8", 200, pieces...)
	if len(errs) > 0 {
		t.Fatalf("errors: %v", errs)
	}
	want := Observation{
		Protocol: ProtocolSSE, Received: at(0), Admitted: at(20), UpstreamSent: at(25), ResponseHeaders: at(90),
		FirstToken: at(110), LastToken: at(140), End: at(180),
		QueueTime: 20 * time.Millisecond, TTFT: 110 * time.Millisecond, UpstreamTTFT: 85 * time.Millisecond,
		E2E: 180 * time.Millisecond, TPOT: 70 * time.Millisecond / 3, HasTTFT: true, HasTPOT: true,
		TokenChunks: 3, DecodeSteps: 2, Chunks: 8,
		ITL:          ITLSummary{Count: 2, Min: 10 * time.Millisecond, Max: 20 * time.Millisecond, Sum: 30 * time.Millisecond, Samples: []time.Duration{10 * time.Millisecond, 20 * time.Millisecond}},
		OutputTokens: 4, OutputTokensSource: TokensFromUsage, CountedTokens: 3, PromptTokens: 7, UsageReported: true,
		FinishReason: "stop", Complete: true, ResponseBytes: int64(len(strings.Join(pieces, ""))), HTTPStatus: 200,
		Engine: EngineTimes{Seen: true, Arrival: time.Unix(0, 1700000000030000000), FirstScheduled: time.Unix(0, 1700000000031000000),
			FirstToken: time.Unix(0, 1700000000105000000), Finish: time.Unix(0, 1700000000160000000), Preemptions: 1},
		Text: "Hello world", TokenIDs: []uint32{},
	}
	if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("observation (-want +got):\n%s", diff)
	}
	if got.Engine.TTFT() != 75*time.Millisecond || got.Engine.QueueTime() != time.Millisecond || (EngineTimes{}).TTFT() != 0 {
		t.Errorf("engine ttft %v queue %v", got.Engine.TTFT(), got.Engine.QueueTime())
	}
}

func TestObserveSSECompletionsCRLFAndComments(t *testing.T) {
	stream := ": keep-alive\r\n\r\n" +
		"data: {\"choices\":[{\"text\":\"a\\u00e9\\n\"}]}\r\n\r\n" +
		"event: message\rdata: {\"choices\":[{\"text\":\"b\"}]}\r\r" +
		"data:{\"choices\":[{\"text\":\"c\",\"finish_reason\":\"length\"}]}\n\n" +
		"data: [DONE]\r\n\r\n"
	got, errs := feed(t, Options{KeepOutput: true}, "text/event-stream", 200, stream)
	if len(errs) > 0 {
		t.Fatalf("errors: %v", errs)
	}
	if got.TokenChunks != 3 || got.OutputTokens != 3 || got.UsageReported || !got.Complete || got.FinishReason != "length" {
		t.Errorf("got %+v", got)
	}
	if got.Text != "aé\nbc" {
		t.Errorf("text = %q, want %q", got.Text, "aé\nbc")
	}
	if !got.OK() {
		t.Errorf("error %v: %s", got.ErrorKind, got.Error)
	}
}

func TestObserveSSEMultiLineDataAndReasoning(t *testing.T) {
	stream := "data: {\"choices\":\ndata: [{\"delta\":{\"reasoning_content\":\"hmm\"}}]}\n\n" +
		"data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0}]}}]}\n\n" +
		"data: {\"choices\":[{\"delta\":{\"tool_calls\":[]}}]}\n\n" +
		"data: [DONE]\n\n"
	got, errs := feed(t, Options{}, "text/event-stream", 200, stream)
	if len(errs) > 0 {
		t.Fatalf("errors: %v", errs)
	}
	if got.TokenChunks != 2 || got.Chunks != 4 {
		t.Errorf("token chunks %d chunks %d, want 2 and 4", got.TokenChunks, got.Chunks)
	}
}

func TestObserveSSEErrors(t *testing.T) {
	tests := []struct {
		name     string
		status   int
		pieces   []string
		wantKind ErrorKind
		wantMsg  string
	}{
		{"error object", 200, []string{chatDelta("x"), sseEvent(`{"error":{"message":"engine overloaded","type":"server_error","code":503}}`)}, ErrorStreamEvent, "engine overloaded"},
		{"error event", 200, []string{"event: error\ndata: upstream died\n\n"}, ErrorStreamEvent, "upstream died"},
		{"vllm error body", 200, []string{sseEvent(`{"object":"error","message":"bad","type":"BadRequestError","code":400}`)}, ErrorStreamEvent, "bad"},
		{"no done", 200, []string{chatDelta("x")}, ErrorTruncated, "[DONE]"},
		{"bad json", 200, []string{sseEvent(`{"choices":[{"text":"x"`), "data: [DONE]\n\n"}, ErrorMalformed, "invalid JSON"},
		{"http status", 503, []string{sseEvent(`{"error":{"message":"try later"}}`)}, ErrorHTTPStatus, "try later"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, _ := feed(t, Options{}, "text/event-stream", tc.status, tc.pieces...)
			if got.ErrorKind != tc.wantKind || !strings.Contains(got.Error, tc.wantMsg) {
				t.Errorf("error = %v %q, want %v containing %q", got.ErrorKind, got.Error, tc.wantKind, tc.wantMsg)
			}
		})
	}
}

func TestObserveSSEEventTooLarge(t *testing.T) {
	big := `{"choices":[{"text":"` + strings.Repeat("x", 10<<20) + `"}]}`
	o := NewObserver(Options{Protocol: ProtocolSSE})
	o.MarkReceived(at(0))
	var err error
	data := []byte("data: " + big + "\n\n" + chatDelta("after"))
	// Arrives in 64 KiB pieces, as a proxy would see it.
	for i := 0; i < len(data); i += 64 << 10 {
		if e := o.Observe(at(i>>16), data[i:min(i+64<<10, len(data))]); e != nil {
			if err != nil {
				t.Fatalf("second error %v after %v", e, err)
			}
			err = e
		}
	}
	o.Finish(at(1000), nil)
	if !errors.Is(err, ErrEventTooLarge) || !strings.Contains(err.Error(), "max_event_bytes 1048576") {
		t.Fatalf("err = %v, want ErrEventTooLarge naming the limit", err)
	}
	ob := o.Observation()
	if ob.ErrorKind != ErrorEventTooLarge || ob.ResponseBytes != int64(len(data)) {
		t.Errorf("kind %v bytes %d", ob.ErrorKind, ob.ResponseBytes)
	}
	if c := cap(o.sse.line) + cap(o.sse.data); c > 2*defaultMaxEventBytes+(128<<10) {
		t.Errorf("buffers grew to %d bytes", c)
	}
}

func TestObserveJSONBody(t *testing.T) {
	body := `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"Hi \"there\""},"finish_reason":"stop"}],` +
		`"usage":{"prompt_tokens":3,"completion_tokens":12},"llmesh_engine":{"arrival_ns":5,"first_scheduled_ns":6,"first_token_ns":7,"finish_ns":8,"preemptions":0}}`
	got, errs := feed(t, Options{KeepOutput: true}, "application/json", 200, body[:40], body[40:])
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if !got.OK() || !got.Complete || got.OutputTokens != 12 || got.PromptTokens != 3 || got.FirstToken != at(100) ||
		got.HasTPOT || got.Text != `Hi "there"` || got.Engine.Finish != time.Unix(0, 8) {
		t.Errorf("got %+v", got)
	}
	got, _ = feed(t, Options{}, "application/json", 400, `{"object":"error","message":"max_tokens too large","code":400}`)
	if got.ErrorKind != ErrorHTTPStatus || !strings.Contains(got.Error, "max_tokens too large") {
		t.Errorf("error = %v %q", got.ErrorKind, got.Error)
	}
	o := NewObserver(Options{Protocol: ProtocolJSON, MaxEventBytes: 16})
	if err := o.Observe(at(1), []byte(body)); !errors.Is(err, ErrEventTooLarge) {
		t.Errorf("err = %v", err)
	}
	got, _ = feed(t, Options{}, "application/json", 200, body[:50])
	if got.ErrorKind != ErrorMalformed {
		t.Errorf("cut body: kind %v %q", got.ErrorKind, got.Error)
	}
}

func TestFinishCauses(t *testing.T) {
	for _, tc := range []struct {
		cause error
		want  ErrorKind
	}{
		{context.Canceled, ErrorCancelled},
		{fmt.Errorf("stop: %w", scheduler.ErrPreempted), ErrorPreempted},
		{errors.New("read: connection reset by peer"), ErrorUpstreamReset},
		{fmt.Errorf("stream: %w", context.DeadlineExceeded), ErrorTimeout},
	} {
		o := NewObserver(Options{})
		o.ResponseHeaders(at(1), 200, MapHeaders{"content-type": "text/event-stream"})
		if err := o.Observe(at(2), []byte(chatDelta("x"))); err != nil {
			t.Fatal(err)
		}
		o.Finish(at(3), tc.cause)
		o.Finish(at(4), nil) // ignored
		if got := o.Observation(); got.ErrorKind != tc.want || got.End != at(3) {
			t.Errorf("%v: kind %v end %v", tc.cause, got.ErrorKind, got.End)
		}
	}
}

func TestResetReuse(t *testing.T) {
	o := GetObserver(Options{KeepOutput: true})
	o.ResponseHeaders(at(1), 200, MapHeaders{"content-type": "text/event-stream"})
	if err := o.Observe(at(2), []byte(chatDelta("first")+"data: {\"choi")); err != nil {
		t.Fatal(err)
	}
	PutObserver(o)
	o = GetObserver(Options{})
	defer PutObserver(o)
	o.ResponseHeaders(at(1), 200, MapHeaders{"content-type": "text/event-stream"})
	if err := o.Observe(at(2), []byte(chatDelta("x")+"data: [DONE]\n\n")); err != nil {
		t.Fatal(err)
	}
	o.Finish(at(3), nil)
	got := o.Observation()
	if !got.OK() || got.TokenChunks != 1 || got.Text != "" {
		t.Errorf("reused observer carried state: %+v", got)
	}
	if p := o.Progress(); !p.FirstToken || p.Tokens != 1 {
		t.Errorf("progress %+v", p)
	}
}

func TestAutoProtocolWithoutHeaders(t *testing.T) {
	o := NewObserver(Options{})
	o.MarkUpstreamSent(at(0))
	if err := o.Observe(at(5), []byte(chatDelta("x")+"data: [DONE]\n\n")); err != nil {
		t.Fatal(err)
	}
	o.Finish(at(6), nil)
	got := o.Observation()
	if got.Protocol != ProtocolSSE || !got.OK() || got.TTFT != 5*time.Millisecond {
		t.Errorf("got %+v", got)
	}
}

func TestPercentDecode(t *testing.T) {
	for in, want := range map[string]string{"a%20b": "a b", "100%": "100%", "%zz": "%zz", "%E2%82%AC": "€"} {
		if got := percentDecode(in); got != want {
			t.Errorf("percentDecode(%q) = %q, want %q", in, got, want)
		}
	}
}

// stopAfterMalformed has a bad event, then an event whose data lines add
// up past a 512-byte limit, then a token.
var stopAfterMalformed = "data: {bad\n\n" + "data: " + strings.Repeat("x", 300) + "\ndata: " + strings.Repeat("x", 300) + "\n\n" +
	`data: {"choices":[{"text":"x"}]}` + "\n\n"

func TestStopsAfterTooLargeFollowingMalformed(t *testing.T) {
	o := NewObserver(Options{Protocol: ProtocolSSE, MaxEventBytes: 512})
	err := o.Observe(at(1), []byte(stopAfterMalformed))
	if !errors.Is(err, ErrMalformed) {
		t.Fatalf("err = %v, want the first error (malformed)", err)
	}
	if got := o.Observation(); got.TokenChunks != 0 || got.ErrorKind != ErrorMalformed {
		t.Errorf("parsing went on after the too-large event: %+v", got)
	}
	if !o.stopped {
		t.Error("observer not stopped")
	}
}

func TestCompressedHTTPBodyIsCountedNotParsed(t *testing.T) {
	o := NewObserver(Options{})
	o.ResponseHeaders(at(1), 200, MapHeaders{"content-type": "text/event-stream", "content-encoding": "gzip"})
	if err := o.Observe(at(2), []byte{0x1f, 0x8b, 8, 0, 0, 0}); err != nil {
		t.Fatal(err)
	}
	o.Finish(at(3), nil)
	got := o.Observation()
	if got.Protocol != ProtocolRaw || got.ContentEncoding != "gzip" || !got.OK() || got.ResponseBytes != 6 {
		t.Errorf("got %+v", got)
	}
}
