package exchange

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/llmesh/llmesh/scheduler"
)

// exchangeOps is the number of host calls FuzzExchangeCalls picks from.
const exchangeOps = 14 + 2*int(numEndings)

// FuzzExchangeCalls drives an Exchange through a random sequence of every
// call a host can make, in any order (illegal calls included: they must do
// nothing), then ends it, and checks that no call panics, that every
// lease the Exchange took is released exactly once, that End makes
// exactly one Record (none for EndDropped), and that calls after End are
// refused.
func FuzzExchangeCalls(f *testing.F) {
	fin := func(e Ending) byte { return byte(14 + e) }
	end := func(e Ending) byte { return byte(14 + int(numEndings) + int(e)) }
	f.Add([]byte{0, 2, 3, 4, 4, 5})                        // a clean stream
	f.Add([]byte{0, 2, 6, 0, 2, 3, 4})                     // requeued, admitted again
	f.Add([]byte{0, 2, 3, 4, fin(EndPreempted)})           // preempted mid-stream
	f.Add([]byte{0, 3, 6, 0, 4, fin(EndFailed), 4, 13})    // a continuation that fails
	f.Add([]byte{end(EndRefused)})                         // refused before admission
	f.Add([]byte{1, 2, 3, 4, end(EndDropped)})             // let through, then dropped
	f.Add([]byte{0, fin(EndFault), 6, 0, 13, 6, 0, 12})    // a fault, then more calls
	f.Add([]byte{0, 3, 4, 4, 4, fin(EndClientGone), 7, 9}) // client gone, calls after
	f.Add([]byte{10, 11, 0, 11, 3, 4, end(EndCompleted), 8, 0, 4})
	cls, err := NewClassifier(ClassifierConfig{
		Classes:      []Class{{Name: "batch", Priority: 10}},
		DefaultClass: "batch",
	})
	if err != nil {
		f.Fatal(err)
	}
	events := strings.SplitAfter(sseStream, "\n\n")
	body := []byte(`{"model":"m","prompt":"p","max_tokens":3,"priority":-1}`)
	f.Fuzz(func(t *testing.T, ops []byte) {
		var recs []Record
		misuses := 0
		cfg := &ExchangeConfig{Classifier: cls, SizeBody: true, Recorder: RecorderFunc(func(r Record) { recs = append(recs, r) }),
			Misuse: func(string, State) { misuses++ }}
		t0 := time.Unix(1000, 0)
		now := func(i int) time.Time { return t0.Add(time.Duration(i+1) * time.Millisecond) }
		head := RequestHead{Path: "/v1/completions", ContentType: "application/json", Headers: MapHeaders{},
			Received: t0, ID: "r", Pool: "p", HasBody: true}
		var x Exchange
		x.Start(cfg, head)
		var leases []*exLease
		dropped := false
		for i, op := range ops {
			switch op := int(op) % exchangeOps; {
			case op == 0:
				l := newExLease()
				x.Admitted(now(i), l)
				if x.View().Lease == scheduler.Lease(l) {
					leases = append(leases, l)
				}
			case op == 1:
				x.Admitted(now(i), nil)
			case op == 2:
				x.UpstreamSent(now(i), "")
			case op == 3:
				x.ResponseHead(now(i), 200, MapHeaders{"content-type": "text/event-stream"})
			case op == 4:
				_ = x.Chunk(now(i), []byte(events[i%len(events)]))
			case op == 5:
				x.Trailers(now(i), MapHeaders{"x-t": "1"})
			case op == 6:
				x.Requeued(EndPreempted)
			case op == 7:
				if s := x.State(); s != StateEnded {
					x.Start(cfg, head) // a misuse: the request is live
				}
			case op == 8:
				x.NoteModel(body, true)
			case op == 9:
				_ = x.Size(body, MapHeaders{})
			case op == 10:
				_, _, _ = x.Guard(body)
			case op == 11:
				_ = x.ServerTiming(now(i), i%2 == 0)
			case op == 12:
				x.UpstreamSent(now(i), "10.0.0.2:8000")
			case op == 13:
				v := x.View()
				_, _ = v.Observation(), v.Output()
			case op < 14+int(numEndings):
				x.Finish(now(i), Ending(op-14), fmt.Errorf("fuzz %d: %w", i, errors.ErrUnsupported))
			default:
				e := Ending(op - 14 - int(numEndings))
				before := x.State()
				if x.End(now(i), e, nil).Pool == "" && before != StateIdle && before != StateEnded {
					dropped = true
				}
			}
		}
		if x.State() != StateEnded {
			if x.End(now(len(ops)), EndCompleted, nil).Pool == "" {
				dropped = true
			}
		}
		// Everything after End is refused, and changes nothing.
		m := misuses
		x.Finish(now(len(ops)), EndFailed, errors.New("late"))
		_ = x.Chunk(now(len(ops)), []byte(events[0]))
		if x.End(now(len(ops)), EndCompleted, nil).Pool != "" || misuses != m+3 || x.State() != StateEnded {
			t.Errorf("calls after End: %d misuses (want 3), state %v", misuses-m, x.State())
		}
		want := 1
		if dropped {
			want = 0
		}
		if len(recs) != want {
			t.Errorf("%d Records, want %d (ops %v)", len(recs), want, ops)
		}
		for i, l := range leases {
			if len(l.released) != 1 {
				t.Errorf("lease %d released %d times (%v), want once (ops %v)", i, len(l.released), l.released, ops)
			}
		}
	})
}
