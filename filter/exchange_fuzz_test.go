package filter

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/llmesh/llmesh/scheduler"
)

// exchangeOps is the number of host calls FuzzExchangeCalls picks from.
const exchangeOps = 19

// FuzzExchangeCalls drives an Exchange through a random sequence of the
// calls a host may make, within the documented protocol (a new lease only
// when none is held and the exchange is not finished; Release before Drop;
// nothing after End or Drop), and checks that no call panics, that every
// lease is released exactly once, and that End makes exactly one Record
// (Drop none).
func FuzzExchangeCalls(f *testing.F) {
	f.Add([]byte{0, 2, 3, 4, 4, 5})                 // a clean stream
	f.Add([]byte{0, 2, 6, 0, 2, 3, 4})              // requeued, admitted again
	f.Add([]byte{0, 2, 3, 4, 7})                    // preempted mid-stream
	f.Add([]byte{0, 8, 9, 11, 13, 14, 15})          // fail, cancel, outcome, finish, release, abort
	f.Add([]byte{17, 10})                           // refused before admission
	f.Add([]byte{1, 2, 3, 4, 18})                   // let through, then dropped
	f.Add([]byte{0, 14, 6, 0, 13, 6, 0, 12, 16})    // release, requeue after finish
	f.Add([]byte{0, 3, 4, 4, 4, 15, 6, 0, 7, 7, 9}) // abort, then more calls
	cls, err := NewClassifier(ClassifierConfig{
		Classes:      []Class{{Name: "batch", Priority: 10}},
		DefaultClass: "batch",
	})
	if err != nil {
		f.Fatal(err)
	}
	events := strings.SplitAfter(sseStream, "\n\n")
	f.Fuzz(func(t *testing.T, ops []byte) {
		var recs int
		cfg := &ExchangeConfig{Classifier: cls, Recorder: RecorderFunc(func(Record) { recs++ })}
		t0 := time.Unix(1000, 0)
		now := func(i int) time.Time { return t0.Add(time.Duration(i+1) * time.Millisecond) }
		var x Exchange
		x.Start(cfg, RequestHead{Path: "/v1/completions", ContentType: "application/json", Headers: MapHeaders{},
			Received: t0, ID: "r", Pool: "p", HasBody: true})
		var leases []*exLease
		dropped := false
	calls:
		for i, op := range ops {
			switch op % exchangeOps {
			case 0:
				if x.Released() && !x.Finished() {
					l := newExLease()
					leases = append(leases, l)
					x.Admitted(now(i), l)
				}
			case 1:
				x.Admitted(now(i), nil)
			case 2:
				x.UpstreamSent(now(i))
			case 3:
				x.ResponseHead(now(i), 200, MapHeaders{"content-type": "text/event-stream"})
			case 4:
				_ = x.Chunk(now(i), []byte(events[i%len(events)]))
			case 5:
				x.Trailers(now(i), MapHeaders{"x-t": "1"})
			case 6:
				x.Requeued()
			case 7:
				x.Preempted(now(i))
			case 8:
				x.Fail(errors.New("upstream reset"), scheduler.Failed)
			case 9:
				x.Cancel(nil)
			case 10:
				x.SetErr(errors.New("host error"))
			case 11:
				x.SetOutcome(scheduler.Done)
			case 12:
				x.SetEndpoint("10.0.0.2:8000")
			case 13:
				x.Finish(now(i), nil)
			case 14:
				x.Release()
			case 15:
				x.Abort(scheduler.Failed)
			case 16:
				_ = x.ServerTiming(now(i), false)
			case 17:
				x.Refused(fmt.Errorf("admission: %w", scheduler.ErrPreempted))
			case 18:
				x.Release()
				x.Drop()
				dropped = true
				break calls
			}
		}
		want := 1
		if dropped {
			want = 0
		} else {
			x.End(now(len(ops)), nil)
		}
		if recs != want {
			t.Errorf("%d Records, want %d (ops %v)", recs, want, ops)
		}
		for i, l := range leases {
			if len(l.released) != 1 {
				t.Errorf("lease %d released %d times (%v), want once (ops %v)", i, len(l.released), l.released, ops)
			}
		}
	})
}
