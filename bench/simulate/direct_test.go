package simulate

import (
	"container/heap"
	"testing"

	"github.com/llmesh/llmesh/bench/result"
	"github.com/llmesh/llmesh/bench/workload"
	"github.com/llmesh/llmesh/scheduler/policy/fifo"
)

// oneFinishingInFlight builds a host (direct: newLoop, else a fleet of one
// without a hop), admits one request of one output token and starts the
// engine step that finishes it; the returned request is in that step.
func oneFinishingInFlight(t *testing.T, direct bool) (*fleet, *vreq) {
	t.Helper()
	w := testWorkload(t)
	o, err := testOptions().withDefaults(w)
	if err != nil {
		t.Fatal(err)
	}
	o.MetricsInterval = 0
	newRun := newFleet
	if direct {
		newRun = newLoop
	}
	f, err := newRun(w, fifo.New(), o)
	if err != nil {
		t.Fatal(err)
	}
	f.stepAll = true
	f.now = epoch
	var win window
	v := win.push(workload.Item{PromptTokens: 64, MaxTokens: 1}, 0)
	f.send(msg{kind: mArrive, v: v})
	for {
		f.deliverDue()
		f.decide()
		if t, ok := f.q.peek(); !ok || t > ns(f.now) {
			break
		}
	}
	e := f.engines[0]
	if v.att == nil || e.eng.Idle() {
		t.Fatalf("direct %v: the request was not admitted", direct)
	}
	if err := f.startStep(e); err != nil {
		t.Fatal(err)
	}
	return f, v
}

// endStep ends f's one engine's step in flight.
func endStep(f *fleet) {
	e := heap.Pop(&f.steps).(*fleetEngine)
	f.now = e.stepEnd
	f.stepEnded(e)
	f.deliverDue()
}

// The single host tries a preemption on the engine first: a victim that
// finishes in the step in flight completes (a late finish), where a fleet's
// proxy, which learns of the finish only later, has already requeued it.
func TestSingleHostLateFinish(t *testing.T) {
	f, v := oneFinishingInFlight(t, true)
	f.preempt(v, v.ticket)
	if f.c.lateFinish != 1 || f.c.preemptions != 0 || v.att == nil {
		t.Fatalf("after the preemption: %d late finishes, %d preemptions, attempt %v", f.c.lateFinish, f.c.preemptions, v.att)
	}
	endStep(f)
	if !v.done || v.rec.Status != result.StatusOK || v.rec.OutputTokens != 1 || v.rec.Preemptions != 0 || f.c.recomputed != 0 {
		t.Errorf("record %+v, %d tokens recomputed; want it completed, never preempted", *v.rec, f.c.recomputed)
	}

	g, w := oneFinishingInFlight(t, false)
	g.preempt(w, w.ticket)
	g.deliverDue()
	if g.c.lateFinish != 0 || g.c.preemptions != 1 {
		t.Fatalf("fleet: %d late finishes, %d preemptions; want the request requeued", g.c.lateFinish, g.c.preemptions)
	}
}

// A client that gives up on a request finishing in the step in flight: the
// single host stops reading it at once, so the step's work for it is not
// counted as computed; a fleet's engine, whose abort comes too late,
// counts it.
func TestSingleHostAbandonInFlight(t *testing.T) {
	for _, direct := range []bool{true, false} {
		f, v := oneFinishingInFlight(t, direct)
		f.clients = newClientTimeouts(1)
		f.abandon(v)
		f.deliverDue()
		endStep(f)
		if !v.done || v.rec.Status != result.StatusTimeout || v.rec.OutputTokens != 0 || v.live != 0 || f.c.timeoutsRunning != 1 {
			t.Errorf("direct %v: record %+v, %d attempts live, %d cancelled running", direct, *v.rec, v.live, f.c.timeoutsRunning)
		}
		if counted := f.c.computed > 0; counted == direct {
			t.Errorf("direct %v: %d tokens counted as computed", direct, f.c.computed)
		}
	}
}
