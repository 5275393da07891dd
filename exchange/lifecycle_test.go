package exchange

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/llmesh/llmesh/scheduler"
)

// wantTransitions is the lifecycle's transition table: for each state
// (rows) and call (columns), the state the call leads to, or "-" where the
// call is refused (it does nothing and ExchangeConfig.Misuse is told).
// docs/architecture.md (request lifecycle) shows the same table.
const wantTransitions = `
state      Start     NoteModel Size      Guard     Admitted  UpstreamSent ResponseHead Chunk     Trailers  Requeued  Finish    End       ServerTiming
idle       received  -         -         -         -         -            -            -         -         -         -         -         -
received   -         received  received  received  admitted  -            streaming    -         -         -         finished  ended     received
admitted   -         admitted  -         admitted  -         admitted     streaming    -         -         requeued  finished  ended     admitted
requeued   -         -         -         -         admitted  -            -            -         -         -         finished  ended     requeued
streaming  -         streaming -         -         -         streaming    -            streaming streaming requeued  finished  ended     streaming
finished   -         -         -         -         -         -            -            -         -         -         -         ended     finished
ended      received  -         -         -         -         -            -            -         -         -         -         -         -
`

// driveTo brings a fresh Exchange to state s the way a host does.
func driveTo(t *testing.T, cfg *ExchangeConfig, s State) (*Exchange, *exLease) {
	t.Helper()
	t0 := time.Unix(1000, 0)
	x := &Exchange{}
	l := newExLease()
	head := RequestHead{Path: "/v1/completions", ContentType: "application/json", Headers: MapHeaders{}, Received: t0,
		Pool: "p", HasBody: true}
	switch s {
	case StateIdle:
		return x, l
	case StateEnded:
		x.Start(cfg, head)
		x.End(t0, EndCompleted, nil)
		return x, l
	}
	x.Start(cfg, head)
	if s == StateReceived {
		return x, l
	}
	x.Admitted(t0, l)
	switch s {
	case StateRequeued:
		x.Requeued(EndPreempted)
	case StateStreaming:
		x.ResponseHead(t0, 200, MapHeaders{"content-type": "text/event-stream"})
	case StateFinished:
		x.Finish(t0, EndCompleted, nil)
	}
	if x.State() != s {
		t.Fatalf("driven to %v, want %v", x.State(), s)
	}
	return x, l
}

// TestExchangeTransitions makes every call in every state and checks the
// state it leads to against wantTransitions, and that a refused call is
// reported and changes nothing.
func TestExchangeTransitions(t *testing.T) {
	t0 := time.Unix(1000, 0).Add(time.Second)
	body := []byte(`{"model":"m","prompt":"p","max_tokens":2}`)
	calls := [numCalls]func(x *Exchange, cfg *ExchangeConfig){
		callStart: func(x *Exchange, cfg *ExchangeConfig) {
			x.Start(cfg, RequestHead{Path: "/v1/completions", Received: t0})
		},
		callNoteModel:    func(x *Exchange, _ *ExchangeConfig) { x.NoteModel(body, true) },
		callSize:         func(x *Exchange, _ *ExchangeConfig) { _ = x.Size(body, nil) },
		callGuard:        func(x *Exchange, _ *ExchangeConfig) { _, _, _ = x.Guard(body) },
		callAdmitted:     func(x *Exchange, _ *ExchangeConfig) { x.Admitted(t0, newExLease()) },
		callUpstreamSent: func(x *Exchange, _ *ExchangeConfig) { x.UpstreamSent(t0, "") },
		callResponseHead: func(x *Exchange, _ *ExchangeConfig) { x.ResponseHead(t0, 200, nil) },
		callChunk:        func(x *Exchange, _ *ExchangeConfig) { _ = x.Chunk(t0, []byte("data: [DONE]\n\n")) },
		callTrailers:     func(x *Exchange, _ *ExchangeConfig) { x.Trailers(t0, MapHeaders{}) },
		callRequeued:     func(x *Exchange, _ *ExchangeConfig) { x.Requeued(EndPreempted) },
		callFinish:       func(x *Exchange, _ *ExchangeConfig) { x.Finish(t0, EndCompleted, nil) },
		callEnd:          func(x *Exchange, _ *ExchangeConfig) { x.End(t0, EndCompleted, nil) },
		callServerTiming: func(x *Exchange, _ *ExchangeConfig) { _ = x.ServerTiming(t0, true) },
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n%-10s", "state")
	for c := range numCalls {
		fmt.Fprintf(&b, " %-*s", max(9, len(c.String())), c)
	}
	b.WriteString("\n")
	for s := range numStates {
		fmt.Fprintf(&b, "%-10s", s)
		for c := range numCalls {
			var misuses []string
			cfg := &ExchangeConfig{Misuse: func(call string, st State) { misuses = append(misuses, call+" in "+st.String()) }}
			x, _ := driveTo(t, cfg, s)
			calls[c](x, cfg)
			got := x.State().String()
			if s == StateIdle && x.State() == StateIdle {
				got = "-" // refused; a zero Exchange has no config to report to
			}
			if len(misuses) > 0 {
				if x.State() != s || len(misuses) != 1 || misuses[0] != c.String()+" in "+s.String() {
					t.Errorf("refused %v in %v: now %v, reported %q", c, s, x.State(), misuses)
				}
				got = "-"
			}
			fmt.Fprintf(&b, " %-*s", max(9, len(c.String())), got)
		}
		b.WriteString("\n")
	}
	trim := func(s string) string {
		lines := strings.Split(strings.TrimSpace(s), "\n")
		for i, l := range lines {
			lines[i] = strings.Join(strings.Fields(l), " ")
		}
		return strings.Join(lines, "\n")
	}
	if diff := cmp.Diff(trim(wantTransitions), trim(b.String())); diff != "" {
		t.Errorf("transition table (-want +got):\n%s\ngot:%s", diff, b.String())
	}
	doc, err := os.ReadFile("../docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(trim(string(doc)), trim(wantTransitions)) {
		t.Error("docs/architecture.md (request lifecycle) does not show the transition table; copy it from wantTransitions")
	}
}

// TestExchangeEndings: how each ending, from each state that can end,
// releases the lease, and what the Record says. The host names the
// ending; the outcome is the Exchange's.
func TestExchangeEndings(t *testing.T) {
	cause := map[Ending]error{
		EndCompleted: nil, EndRefused: scheduler.ErrQueueFull, EndClientGone: nil,
		EndFailed: errors.New("upstream reset"), EndPreempted: nil, EndFault: nil, EndDropped: scheduler.ErrCancelled,
	}
	type row struct {
		From     string
		Ending   string
		Released string // the lease's releases
		Outcome  string // the Record's
		Kind     string
		Err      bool
		Records  int
	}
	var got []row
	for _, from := range []State{StateReceived, StateAdmitted, StateRequeued, StateStreaming} {
		for e := range numEndings {
			var recs []Record
			cfg := &ExchangeConfig{Recorder: RecorderFunc(func(r Record) { recs = append(recs, r) }),
				Misuse: func(c string, s State) { t.Errorf("%v from %v: %s refused in %v", e, from, c, s) }}
			x, l := driveTo(t, cfg, from)
			rec := x.End(time.Unix(1001, 0), e, cause[e])
			r := row{From: from.String(), Ending: e.String(), Outcome: rec.Outcome.String(), Kind: rec.ErrorKind.String(),
				Err: rec.Err != nil, Records: len(recs)}
			for _, o := range l.released {
				r.Released += o.String() + " "
			}
			got = append(got, r)
		}
	}
	var b strings.Builder
	for _, r := range got {
		fmt.Fprintf(&b, "%-9s %-11s released=[%s] outcome=%s kind=%s err=%v records=%d\n",
			r.From, r.Ending, strings.TrimSpace(r.Released), r.Outcome, r.Kind, r.Err, r.Records)
	}
	checkGolden(t, "testdata/exchange_endings.golden", b.String())
}

// TestExchangeViewIsAValue: the read-only accessors live on ExchangeView,
// a value taken from the Exchange; the Exchange itself keeps at most 15
// methods and no bool field (its state is one State).
func TestExchangeViewIsAValue(t *testing.T) {
	if n := reflect.TypeOf(&Exchange{}).NumMethod(); n > 15 {
		t.Errorf("Exchange exports %d methods, want at most 15", n)
	}
	for i := range reflect.TypeOf(Exchange{}).NumField() {
		if f := reflect.TypeOf(Exchange{}).Field(i); f.Type.Kind() == reflect.Bool {
			t.Errorf("Exchange keeps bool field %s: its state is State", f.Name)
		}
	}
}

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

// checkGolden compares got with the golden file at path (-update rewrites it).
func checkGolden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s (-want +got):\n%s", path, diff)
	}
}
