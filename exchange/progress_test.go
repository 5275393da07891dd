package exchange

import (
	"testing"
	"time"

	"github.com/llmesh/llmesh/scheduler"
)

// progressLease records the progress reports it gets.
type progressLease struct {
	scheduler.Lease
	got []scheduler.Progress
}

func (l *progressLease) Progress(p scheduler.Progress) { l.got = append(l.got, p) }

func TestProgressReporter(t *testing.T) {
	o := NewObserver(Options{})
	now := time.Now()
	o.MarkReceived(now)
	o.ResponseHeaders(now, 200, MapHeaders{"content-type": "text/event-stream"})
	l := &progressLease{}
	var r progressReporter
	r.Report(nil, o) // no lease: nothing
	r.Report(l, o)   // nothing yet
	for _, ev := range []string{
		`data: {"choices":[{"index":0,"delta":{"role":"assistant"}}]}` + "\n\n",
		`data: {"choices":[{"index":0,"delta":{"content":"a"}}]}` + "\n\n",
		`data: {"choices":[{"index":0,"delta":{"content":"b"}}]}` + "\n\n",
	} {
		if err := o.Observe(now, []byte(ev)); err != nil {
			t.Fatal(err)
		}
		r.Report(l, o)
		r.Report(l, o) // the same progress is not reported twice
	}
	want := []scheduler.Progress{{FirstToken: true, Tokens: 1}, {FirstToken: true, Tokens: 2}}
	if len(l.got) != len(want) || l.got[0] != want[0] || l.got[1] != want[1] {
		t.Errorf("reports %+v, want %+v", l.got, want)
	}
	if n := testing.AllocsPerRun(100, func() { r.Report(l, o) }); n != 0 {
		t.Errorf("Report allocates %v times", n)
	}
}

func TestOutcomeOf(t *testing.T) {
	for _, tc := range []struct {
		ob        Observation
		preempted bool
		want      scheduler.Outcome
	}{
		{Observation{Complete: true}, false, scheduler.Done},
		{Observation{ErrorKind: ErrorCancelled}, false, scheduler.Cancelled},
		{Observation{ErrorKind: ErrorUpstreamReset}, false, scheduler.Failed},
		{Observation{ErrorKind: ErrorCancelled}, true, scheduler.Preempted},
	} {
		if got := OutcomeOf(&tc.ob, tc.preempted); got != tc.want {
			t.Errorf("OutcomeOf(%v, %v) = %v, want %v", tc.ob.ErrorKind, tc.preempted, got, tc.want)
		}
	}
}
