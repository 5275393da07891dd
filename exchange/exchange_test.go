package exchange

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/llmesh/llmesh/scheduler"
)

// exLease is a lease that counts what the exchange tells it.
type exLease struct {
	pre      chan struct{}
	progress []scheduler.Progress
	released []scheduler.Outcome
	endpoint string
}

func newExLease() *exLease { return &exLease{pre: make(chan struct{})} }

func (l *exLease) Preempt() <-chan struct{}      { return l.pre }
func (l *exLease) Progress(p scheduler.Progress) { l.progress = append(l.progress, p) }
func (l *exLease) Release(o scheduler.Outcome)   { l.released = append(l.released, o) }
func (l *exLease) QueueTime() time.Duration      { return 0 }
func (l *exLease) Endpoint() string              { return l.endpoint }

var _ scheduler.Routed = (*exLease)(nil)

func exClassifier(t *testing.T) *Classifier {
	t.Helper()
	c, err := NewClassifier(ClassifierConfig{
		Classes:        []Class{{Name: "batch", Priority: 10}, {Name: "urgent", Priority: 1}},
		DefaultClass:   "batch",
		Rules:          []Rule{{Model: "fast-model", Class: "urgent"}},
		PriorityHeader: "x-priority",
		TrustedSources: nil,
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

const sseStream = "data: {\"choices\":[{\"text\":\"a\"}]}\n\n" +
	"data: {\"choices\":[{\"text\":\"b\"}]}\n\n" +
	"data: {\"choices\":[{\"text\":\"c\",\"finish_reason\":\"length\"}],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":3}}\n\n" +
	"data: [DONE]\n\n"

// TestExchangeSequence drives one request through every phase and checks
// the classification by model, the sizes, the guard, the progress to the
// lease, the single release and the Record.
func TestExchangeSequence(t *testing.T) {
	var recs []Record
	cfg := &ExchangeConfig{Classifier: exClassifier(t), SizeBody: true, Recorder: RecorderFunc(func(r Record) { recs = append(recs, r) })}
	t0 := time.Unix(1000, 0)
	var x Exchange
	x.Start(cfg, RequestHead{Path: "/v1/completions", ContentType: "application/json", Headers: MapHeaders{"x-session": "k"},
		Received: t0, ID: "r1", Pool: "p", ClassPriority: true, AffinityHeader: "X-Session", HasBody: true})
	if got := x.View().Class.Name; got != "batch" {
		t.Fatalf("class from the head %q, want batch", got)
	}
	plan := x.View().Plan
	if diff := cmp.Diff(BodyPlan{Size: true, Guard: GuardJSON, DropContentLength: true}, plan); diff != "" {
		t.Fatalf("plan (-want +got):\n%s", diff)
	}
	body := []byte(`{"model":"fast-model","prompt":"hello world!","max_tokens":3,"stream":true,"priority":-100}`)
	if err := x.Size(body, MapHeaders{}); err != nil {
		t.Fatal(err)
	}
	if got := x.View().Class.Name; got != "urgent" {
		t.Fatalf("class after the model %q, want urgent", got)
	}
	out, changed, err := x.Guard(body)
	if err != nil || !changed {
		t.Fatalf("guard: changed %v, err %v", changed, err)
	}
	if !strings.Contains(string(out), `"priority":1`) || strings.Contains(string(out), "-100") {
		t.Fatalf("guard wrote %s, want the class priority 1 only", out)
	}
	req := x.View().Request
	if diff := cmp.Diff(scheduler.Request{ID: "r1", Pool: "p", Class: "urgent", PromptTokens: req.PromptTokens, MaxTokens: 3,
		Arrival: t0, Affinity: "k"}, req); diff != "" || req.PromptTokens <= 0 {
		t.Fatalf("request (-want +got):\n%s (prompt tokens %d)", diff, req.PromptTokens)
	}
	l := newExLease()
	l.endpoint = "10.0.0.1:8000"
	x.Admitted(t0.Add(10*time.Millisecond), l)
	x.UpstreamSent(t0.Add(11*time.Millisecond), "")
	x.ResponseHead(t0.Add(20*time.Millisecond), 200, MapHeaders{"content-type": "text/event-stream"})
	events := strings.SplitAfter(sseStream, "\n\n")
	for i, ev := range events {
		if ev == "" {
			continue
		}
		if err := x.Chunk(t0.Add(time.Duration(30+10*i)*time.Millisecond), []byte(ev)); err != nil {
			t.Fatal(err)
		}
	}
	if st := x.ServerTiming(t0.Add(80*time.Millisecond), true); !strings.Contains(st, "e2e;dur=80.000") {
		t.Errorf("server timing %q, want e2e to the given time", st)
	}
	rec := x.End(t0.Add(90*time.Millisecond), EndCompleted, nil)
	if rec2 := x.End(t0.Add(time.Second), EndCompleted, nil); rec2.Class != "" {
		t.Error("a second End returned a Record")
	}
	if diff := cmp.Diff([]scheduler.Outcome{scheduler.Done}, l.released); diff != "" {
		t.Errorf("releases (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]scheduler.Progress{{FirstToken: true, Tokens: 1}, {FirstToken: true, Tokens: 2}, {FirstToken: true, Tokens: 3}}, l.progress); diff != "" {
		t.Errorf("progress (-want +got):\n%s", diff)
	}
	if len(recs) != 1 {
		t.Fatalf("%d records, want 1", len(recs))
	}
	if rec.Class != "urgent" || rec.Model != "fast-model" || rec.Pool != "p" || rec.Outcome != scheduler.Done ||
		rec.Endpoint != "10.0.0.1:8000" || !rec.OK() || rec.OutputTokens != 3 || rec.QueueTime != 10*time.Millisecond ||
		rec.E2E != 90*time.Millisecond {
		t.Errorf("record %+v", rec)
	}
}

// TestExchangeRequeue: a request preempted before its first byte is sent
// again; the preemptions are counted in one Record and every lease is
// released once.
func TestExchangeRequeue(t *testing.T) {
	var recs []Record
	cfg := &ExchangeConfig{Recorder: RecorderFunc(func(r Record) { recs = append(recs, r) }), DefaultClass: "d"}
	t0 := time.Unix(1000, 0)
	var x Exchange
	x.Start(cfg, RequestHead{Path: "/v1/completions", ContentType: "application/json", Received: t0, Pool: "p"})
	if x.View().Class.Name != "d" {
		t.Fatalf("class %q, want the default", x.View().Class.Name)
	}
	l1, l2 := newExLease(), newExLease()
	x.Admitted(t0.Add(time.Millisecond), l1)
	x.UpstreamSent(t0.Add(2*time.Millisecond), "")
	x.Requeued(EndPreempted)
	x.Admitted(t0.Add(50*time.Millisecond), l2)
	x.UpstreamSent(t0.Add(51*time.Millisecond), "")
	x.ResponseHead(t0.Add(60*time.Millisecond), 200, MapHeaders{"content-type": "text/event-stream"})
	_ = x.Chunk(t0.Add(70*time.Millisecond), []byte(sseStream))
	st := x.ServerTiming(t0.Add(80*time.Millisecond), true)
	rec := x.End(t0.Add(80*time.Millisecond), EndCompleted, nil)
	if diff := cmp.Diff([]scheduler.Outcome{scheduler.Preempted}, l1.released); diff != "" {
		t.Errorf("first lease (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]scheduler.Outcome{scheduler.Done}, l2.released); diff != "" {
		t.Errorf("second lease (-want +got):\n%s", diff)
	}
	if rec.Preemptions != 1 || rec.QueueTime != time.Millisecond || rec.UpstreamTTFT != 19*time.Millisecond {
		t.Errorf("record: preemptions %d, queue %v, upstream TTFT %v", rec.Preemptions, rec.QueueTime, rec.UpstreamTTFT)
	}
	if !strings.Contains(st, `preemptions;desc="1"`) {
		t.Errorf("server timing %q does not name the preemption", st)
	}
	if len(recs) != 1 {
		t.Errorf("%d records, want 1", len(recs))
	}
}

// TestExchangePreempted: a host that cannot resend ends the request with
// the retryable reply; the lease is released as preempted, once.
func TestExchangePreempted(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var x Exchange
	x.Start(&ExchangeConfig{}, RequestHead{Path: MethodLLMV1, ContentType: "application/grpc", Received: t0})
	if !x.View().GRPC() {
		t.Fatal("not gRPC")
	}
	l := newExLease()
	x.Admitted(t0, l)
	x.Finish(t0.Add(time.Millisecond), EndPreempted, nil)
	rec := x.End(t0.Add(2*time.Millisecond), EndFailed, errors.New("too late: the first ending stands"))
	if diff := cmp.Diff([]scheduler.Outcome{scheduler.Preempted}, l.released); diff != "" {
		t.Errorf("releases (-want +got):\n%s", diff)
	}
	if rec.Outcome != scheduler.Preempted || rec.Preemptions != 1 || !errors.Is(rec.Err, scheduler.ErrPreempted) ||
		rec.ErrorKind != ErrorPreempted {
		t.Errorf("record: outcome %v, preemptions %d, err %v, kind %v", rec.Outcome, rec.Preemptions, rec.Err, rec.ErrorKind)
	}
}

// TestExchangeOutcomes: the outcome follows the observation unless the
// host fixed it; a request never admitted records Done.
func TestExchangeOutcomes(t *testing.T) {
	t0 := time.Unix(1000, 0)
	for _, tc := range []struct {
		name  string
		drive func(x *Exchange)
		want  scheduler.Outcome
		kind  ErrorKind
	}{
		{"clean", func(x *Exchange) { _ = x.Chunk(t0, []byte(sseStream)) }, scheduler.Done, ErrorNone},
		{"truncated", func(x *Exchange) { _ = x.Chunk(t0, []byte("data: {}\n\n")) }, scheduler.Failed, ErrorTruncated},
		{"cancelled", func(x *Exchange) { x.Finish(t0, EndClientGone, nil) }, scheduler.Cancelled, ErrorCancelled},
		{"host error", func(x *Exchange) { x.Finish(t0, EndFailed, errors.New("reset")) }, scheduler.Failed, ErrorUpstreamReset},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var x Exchange
			x.Start(&ExchangeConfig{}, RequestHead{Path: "/v1/completions", Received: t0})
			l := newExLease()
			x.Admitted(t0, l)
			x.ResponseHead(t0, 200, MapHeaders{"content-type": "text/event-stream"})
			tc.drive(&x)
			rec := x.End(t0, EndCompleted, nil)
			if diff := cmp.Diff([]scheduler.Outcome{tc.want}, l.released); diff != "" {
				t.Errorf("releases (-want +got):\n%s", diff)
			}
			if rec.Outcome != tc.want || rec.ErrorKind != tc.kind {
				t.Errorf("record: outcome %v kind %v, want %v %v", rec.Outcome, rec.ErrorKind, tc.want, tc.kind)
			}
		})
	}
	var x Exchange
	x.Start(&ExchangeConfig{}, RequestHead{Path: "/v1/completions", Received: t0})
	rec := x.End(t0, EndRefused, scheduler.ErrQueueFull)
	if rec.Outcome != scheduler.Done || !errors.Is(rec.Err, scheduler.ErrQueueFull) || rec.ErrorKind != ErrorHTTPStatus {
		t.Errorf("refused: outcome %v, err %v, kind %v", rec.Outcome, rec.Err, rec.ErrorKind)
	}
}

// TestExchangePlan: what the body needs, per content type and trust.
func TestExchangePlan(t *testing.T) {
	c, err := NewClassifier(ClassifierConfig{Classes: []Class{{Name: "a"}}, PriorityHeader: "x-priority",
		TrustedMarkerHeader: "x-mark", TrustedMarkerValue: "s"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := &ExchangeConfig{Classifier: c, SizeBody: true}
	for _, tc := range []struct {
		name string
		head RequestHead
		want BodyPlan
	}{
		{"no body", RequestHead{Path: "/v1/completions", ContentType: "application/json"}, BodyPlan{}},
		{"json", RequestHead{Path: "/v1/completions", ContentType: "application/json", HasBody: true}, BodyPlan{Size: true, Guard: GuardJSON}},
		{"json trusted", RequestHead{Path: "/v1/completions", ContentType: "application/json", HasBody: true,
			Headers: MapHeaders{"x-mark": "s"}}, BodyPlan{Size: true}},
		{"llm.v1", RequestHead{Path: MethodLLMV1, ContentType: "application/grpc", HasBody: true},
			BodyPlan{Size: true, Guard: GuardGRPC, DropContentLength: true}},
		{"vllm", RequestHead{Path: MethodVLLM, ContentType: "application/grpc+proto", HasBody: true}, BodyPlan{Size: true}},
		{"grpc-web llm.v1", RequestHead{Path: MethodLLMV1, ContentType: "application/grpc-web", HasBody: true},
			BodyPlan{Size: true, Guard: GuardGRPC, DropContentLength: true}},
		{"grpc-web-text", RequestHead{Path: MethodLLMV1, ContentType: "application/grpc-web-text", HasBody: true},
			BodyPlan{Refuse: errGuardWebText}},
		{"grpc-web-text vllm", RequestHead{Path: MethodVLLM, ContentType: "application/grpc-web-text", HasBody: true}, BodyPlan{}},
		{"text", RequestHead{Path: "/v1/completions", ContentType: "text/plain", HasBody: true}, BodyPlan{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var x Exchange
			x.Start(cfg, tc.head)
			if diff := cmp.Diff(tc.want, x.View().Plan, cmpopts.EquateErrors()); diff != "" {
				t.Errorf("plan (-want +got):\n%s", diff)
			}
			x.End(time.Time{}, EndCompleted, nil)
		})
	}
	var x Exchange
	x.Start(cfg, RequestHead{Path: "/v1/completions", ContentType: "application/json", ContentEncoding: "gzip", HasBody: true})
	if p := x.View().Plan; !errors.Is(p.Refuse, errPriorityEncoding) || p.Guard != GuardNone {
		t.Errorf("compressed JSON plan %+v, want a refusal", p)
	}
	if r := ReplyFor(x.View().Plan.Refuse); r.HTTPStatus != 415 {
		t.Errorf("reply %+v, want 415", r)
	}
}

// BenchmarkExchangeChunk is the per-chunk path both hosts take: it must
// allocate nothing.
func BenchmarkExchangeChunk(b *testing.B) {
	ev := []byte("data: {\"id\":\"x\",\"choices\":[{\"index\":0,\"text\":\"tok\"}]}\n\n")
	var x Exchange
	t0 := time.Unix(1000, 0)
	x.Start(&ExchangeConfig{Observer: Options{MaxITLSamples: -1}}, RequestHead{Path: "/v1/completions", Received: t0})
	x.Admitted(t0, newExLease())
	x.ResponseHead(t0, 200, MapHeaders{"content-type": "text/event-stream"})
	l := &nopLease{}
	x.lease = l
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		_ = x.Chunk(t0.Add(time.Duration(i)), ev)
	}
}

type nopLease struct{}

func (nopLease) Preempt() <-chan struct{}    { return nil }
func (nopLease) Progress(scheduler.Progress) {}
func (nopLease) Release(scheduler.Outcome)   {}
func (nopLease) QueueTime() time.Duration    { return 0 }

// TestExchangeFaultAndDrop: a host fault releases the lease at once as
// failed and End still records; a dropped request is released as
// cancelled, once, and makes no Record.
func TestExchangeFaultAndDrop(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var recs []Record
	cfg := &ExchangeConfig{Recorder: RecorderFunc(func(r Record) { recs = append(recs, r) })}
	var x Exchange
	x.Start(cfg, RequestHead{Path: "/v1/completions", Received: t0})
	l := newExLease()
	x.Admitted(t0, l)
	x.Finish(t0, EndFault, nil)
	if x.State() != StateFinished || x.View().Lease != nil {
		t.Errorf("a fault left the exchange %v, lease %v", x.State(), x.View().Lease)
	}
	rec := x.End(t0, EndCompleted, nil)
	if diff := cmp.Diff([]scheduler.Outcome{scheduler.Failed}, l.released); diff != "" {
		t.Errorf("abort releases (-want +got):\n%s", diff)
	}
	if len(recs) != 1 || rec.Outcome != scheduler.Failed {
		t.Errorf("abort: %d records, outcome %v", len(recs), rec.Outcome)
	}

	var y Exchange
	y.Start(cfg, RequestHead{Path: "/v1/completions", Received: t0})
	l2 := newExLease()
	y.Admitted(t0, l2)
	if r := y.End(t0, EndDropped, scheduler.ErrCancelled); r.Class != "" {
		t.Error("a dropped request returned a Record")
	}
	if diff := cmp.Diff([]scheduler.Outcome{scheduler.Cancelled}, l2.released); diff != "" {
		t.Errorf("drop releases (-want +got):\n%s", diff)
	}
	if r := y.End(t0, EndCompleted, nil); len(recs) != 1 || r.Class != "" {
		t.Error("End after Drop recorded")
	}
}
