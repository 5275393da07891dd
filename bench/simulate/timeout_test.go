package simulate

import (
	"testing"
	"time"

	"github.com/llmesh/llmesh/bench/result"
	"github.com/llmesh/llmesh/bench/workload"
	"github.com/llmesh/llmesh/scheduler/policy"
)

// timeoutScene is one slot (static capacity, policy priority) and a 2 s
// client timeout:
//
//	0     batch 0 runs briefly (≈ 0.5 s)
//	0.1 s batch 1 waits
//	0.2 s interactive 2 waits, admitted before batch 1 when batch 0 ends,
//	      and runs 1,000 tokens, past its timeout at 2.2 s
//	2.15s batch 3 waits
//
// Batch 1 waits behind interactive 2 until its client gives up at 2.1 s:
// withdrawn, never admitted. Interactive 2's client gives up at 2.2 s:
// cancelled on the engine, which frees the slot for batch 3 at once.
// Without the client's timeout, batch 1 would run after interactive 2 and
// batch 3 after that, at about 7 s.
func timeoutScene(t *testing.T) (*workload.Workload, Options, []workload.Item) {
	t.Helper()
	w := testWorkload(t)
	w.Spec.Timeout = workload.Duration(2 * time.Second)
	o, err := Options{MaxInflight: 1, MetricsInterval: -1, SaturationRequests: 300}.withDefaults(w)
	if err != nil {
		t.Fatal(err)
	}
	items := []workload.Item{
		{Index: 0, Class: 1, At: 0, PromptTokens: 200, MaxTokens: 64},
		{Index: 1, Class: 1, At: 100 * time.Millisecond, PromptTokens: 200, MaxTokens: 16},
		{Index: 2, Class: 0, At: 200 * time.Millisecond, PromptTokens: 200, MaxTokens: 1000},
		{Index: 3, Class: 1, At: 2150 * time.Millisecond, PromptTokens: 200, MaxTokens: 16},
	}
	return w, o, items
}

func at(d time.Duration) int64 { return int64(d) }

func TestTimedOutWaitingRequestIsNeverAdmitted(t *testing.T) {
	for _, hop := range []time.Duration{0, time.Millisecond} {
		w, o, items := timeoutScene(t)
		o.Hop = hop
		recs, reqs, _ := runScene(t, w, o, items)
		r := recs[1]
		if r.Status != result.StatusTimeout || r.DoneNS != at(2100*time.Millisecond) || r.FirstTokenNS != 0 || r.OutputTokens != 0 {
			t.Errorf("hop %v: batch 1 = %s at %v, first token %d, %d tokens; want a timeout at 2.1s with nothing received",
				hop, r.Status, time.Duration(r.DoneNS), r.FirstTokenNS, r.OutputTokens)
		}
		if reqs[1].wasAdmit {
			t.Errorf("hop %v: batch 1 was admitted after its client gave up", hop)
		}
	}
}

func TestTimedOutRunningRequestFreesItsEngine(t *testing.T) {
	for _, hop := range []time.Duration{0, time.Millisecond} {
		w, o, items := timeoutScene(t)
		o.Hop = hop
		recs, reqs, idle := runScene(t, w, o, items)
		r := recs[2]
		if r.Status != result.StatusTimeout || r.DoneNS != at(2200*time.Millisecond) || r.OutputTokens == 0 || r.OutputTokens >= 1000 {
			t.Errorf("hop %v: interactive 2 = %s at %v with %d tokens; want a timeout at 2.2s, part of its tokens received",
				hop, r.Status, time.Duration(r.DoneNS), r.OutputTokens)
		}
		if n := len(r.ChunkNS); n != r.OutputTokens || r.ChunkNS[n-1] > r.DoneNS {
			t.Errorf("hop %v: interactive 2 has %d chunk times for %d tokens, the last at %v", hop, n, r.OutputTokens, time.Duration(r.ChunkNS[n-1]))
		}
		// The release reaches the scheduler a hop after the client gave
		// up; the admission the proxy a hop after that.
		if got, want := reqs[3].queued, 50*time.Millisecond+2*hop; got != want {
			t.Errorf("hop %v: batch 3 waited %v for the slot; want %v (the slot freed at the timeout)", hop, got, want)
		}
		if recs[3].Status != result.StatusOK {
			t.Errorf("hop %v: batch 3 = %s (%s); want ok", hop, recs[3].Status, recs[3].Error)
		}
		if !idle {
			t.Errorf("hop %v: an engine still holds work at the end", hop)
		}
	}
}

// runScene runs items through the single-engine loop (hop 0) or the fleet
// loop and reports whether every engine is idle at the end.
func runScene(t *testing.T, w *workload.Workload, o Options, items []workload.Item) ([]result.Record, []vreq, bool) {
	t.Helper()
	pol, err := policy.Lookup("priority")
	if err != nil {
		t.Fatal(err)
	}
	clients := newClientTimeouts(w.Spec.Timeout.D())
	if !o.fleet() {
		l, err := newLoop(w, pol, o)
		if err != nil {
			t.Fatal(err)
		}
		l.clients = clients
		recs, err := l.run(items)
		if err != nil {
			t.Fatal(err)
		}
		st := l.ss[0].m.Stats()[0]
		if st.InFlight != 0 || st.Queued["batch"]+st.Queued["interactive"] != 0 {
			t.Errorf("the scheduler holds %d in flight, %v queued at the end", st.InFlight, st.Queued)
		}
		return recs, l.reqs, l.engines[0].eng.Idle()
	}
	f, err := newFleet(w, pol, o)
	if err != nil {
		t.Fatal(err)
	}
	f.clients = clients
	recs, err := f.run(items)
	if err != nil {
		t.Fatal(err)
	}
	idle := true
	for _, e := range f.engines {
		idle = idle && e.eng.Idle()
	}
	return recs, f.reqs, idle
}

// Without the client's timeout every request runs to its end: the old
// behaviour, kept by Options.RunPastTimeout.
func TestRunPastTimeoutRunsEveryRequest(t *testing.T) {
	w, o, items := timeoutScene(t)
	pol, _ := policy.Lookup("priority")
	l, err := newLoop(w, pol, o)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := l.run(items)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range recs {
		if r.Status != result.StatusOK || r.OutputTokens != items[i].MaxTokens {
			t.Errorf("request %d = %s with %d tokens; want every one run to its end", i, r.Status, r.OutputTokens)
		}
	}
	if !l.reqs[1].wasAdmit || time.Duration(recs[3].DoneNS) < 5*time.Second {
		t.Errorf("batch 1 admitted %v, batch 3 done at %v; want both after interactive 2's 1,000 tokens", l.reqs[1].wasAdmit, time.Duration(recs[3].DoneNS))
	}
}

// A fleet at 8 times its saturation ends within its arrivals plus the
// timeout: every client gives up by then. Without the timeout the same
// run drains its backlog for many times that.
func TestOverloadedFleetEndsWithinTheTimeout(t *testing.T) {
	w := testWorkload(t)
	const timeout = 10 * time.Second
	w.Spec.Timeout = workload.Duration(timeout)
	o := Options{Engines: 4, Proxies: 2, Hop: 500 * time.Microsecond, SaturationRequests: 300, Duration: 20 * time.Second, SkipFloor: true}
	for _, past := range []bool{false, true} {
		o.RunPastTimeout = past
		res, err := Evaluate(w, []string{"fifo", "preemptive"}, []float64{8}, o)
		if err != nil {
			t.Fatal(err)
		}
		// Arrivals end the duration after the first past the warm-up, a
		// few milliseconds after 2 s at this rate.
		end := (22100*time.Millisecond + timeout).Seconds()
		for _, r := range res.Runs {
			s := r.Sim
			t.Logf("run past timeout %v, %s: %.9f virtual s, %d requests, %d withdrawn, %d cancelled running, statuses %v",
				past, r.Policy, s.VirtualSeconds, s.Requests, s.TimeoutsQueued, s.TimeoutsRunning, r.Requests)
			switch {
			case !past && s.VirtualSeconds > end:
				t.Errorf("%s: the run lasted %.1f virtual s; want at most %.1f", r.Policy, s.VirtualSeconds, end)
			case !past && (s.TimeoutsRunning == 0 || r.Requests[result.StatusTimeout] > s.TimeoutsQueued+s.TimeoutsRunning):
				// The report counts measured requests, the counters the warm-up too.
				t.Errorf("%s: %d timeouts reported, %d withdrawn, %d cancelled running", r.Policy, r.Requests[result.StatusTimeout], s.TimeoutsQueued, s.TimeoutsRunning)
			case past && s.VirtualSeconds < 2*end:
				t.Errorf("%s: running past the timeout lasted %.1f virtual s; want the backlog drained, over %.1f", r.Policy, s.VirtualSeconds, 2*end)
			}
		}
	}
}

// With a client timeout the fleet of one is still the single-engine loop,
// record for record.
func TestFleetOfOneIsTheLoopWithTimeouts(t *testing.T) {
	w := testWorkload(t)
	w.Spec.Timeout = workload.Duration(3 * time.Second)
	for _, name := range []string{"fifo", "priority", "preemptive"} {
		o, err := testOptions().withDefaults(w)
		if err != nil {
			t.Fatal(err)
		}
		sw, items := overSaturation(t, w, &o)
		l, f, got := loopAgainstFleetOfOne(t, sw, items, name, o, newClientTimeouts(w.Spec.Timeout.D()))
		if l.c.timeoutsQueued != f.c.timeoutsQueued || l.c.timeoutsRunning != f.c.timeoutsRunning || l.c.timeoutsRunning == 0 {
			t.Errorf("%s: timeouts loop %d queued %d running, fleet %d, %d", name, l.c.timeoutsQueued, l.c.timeoutsRunning, f.c.timeoutsQueued, f.c.timeoutsRunning)
		}
		t.Logf("%s: %d records, %d withdrawn, %d cancelled running", name, len(got), f.c.timeoutsQueued, f.c.timeoutsRunning)
	}
}

// In every fleet layout at 8 times saturation, a client that gives up has
// its record end exactly at its timeout, every other record within it, and
// no record holds a token its client would have received after it left.
func TestTimeoutRecordsInEveryLayout(t *testing.T) {
	w := testWorkload(t)
	const timeout = 4 * time.Second
	w.Spec.Timeout = workload.Duration(timeout)
	for _, o := range []Options{
		{Engines: 3, Proxies: 2},
		{Engines: 3, Proxies: 2, Hop: time.Millisecond, Routing: RoutingPool},
		{Engines: 2, Proxies: 2, Hop: 500 * time.Microsecond, Schedulers: SchedulersPerProxy},
		{Engines: 2, Proxies: 3, Hop: 2 * time.Millisecond, LateHandoff: true},
	} {
		o.SaturationRequests, o.Duration = 300, 10*time.Second
		o, err := o.withDefaults(w)
		if err != nil {
			t.Fatal(err)
		}
		sat, err := saturation(o.prepare(w), o)
		if err != nil {
			t.Fatal(err)
		}
		sw := o.prepare(w).ScaleRate(8 * sat.RPS * float64(o.Engines) / naturalRate(w))
		items, err := collect(sw)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"fifo", "preemptive"} {
			pol, _ := policy.Lookup(name)
			f, err := newFleet(sw, pol, o)
			if err != nil {
				t.Fatal(err)
			}
			f.clients = newClientTimeouts(timeout)
			recs, err := f.run(items)
			if err != nil {
				t.Fatal(err)
			}
			what := func() string {
				return name + " " + o.Routing + " " + o.Schedulers + " hop " + o.Hop.String()
			}
			n := map[result.Status]int{}
			for i, r := range recs {
				n[r.Status]++
				took := time.Duration(r.DoneNS - r.SentNS)
				switch {
				case r.Status == result.StatusTimeout && took != timeout:
					t.Fatalf("%s: request %d timed out after %v, not at %v", what(), i, took, timeout)
				case took > timeout:
					t.Fatalf("%s: request %d (%s) ended after %v, past the timeout", what(), i, r.Status, took)
				case len(r.ChunkNS) != r.OutputTokens:
					t.Fatalf("%s: request %d has %d chunk times for %d tokens", what(), i, len(r.ChunkNS), r.OutputTokens)
				case len(r.ChunkNS) > 0 && r.ChunkNS[len(r.ChunkNS)-1] > r.DoneNS:
					t.Fatalf("%s: request %d has a token after its end", what(), i)
				case r.FirstTokenNS > r.DoneNS:
					t.Fatalf("%s: request %d has its first token after its end", what(), i)
				}
			}
			if n[result.StatusTimeout] == 0 || n[result.StatusTimeout] != f.c.timeoutsQueued+f.c.timeoutsRunning {
				t.Errorf("%s: %d timed-out records, %d withdrawn + %d cancelled", what(), n[result.StatusTimeout], f.c.timeoutsQueued, f.c.timeoutsRunning)
			}
			for _, e := range f.engines {
				if e.util.RunningPeak > f.engines[0].eng.Config().MaxNumSeqs {
					t.Errorf("%s: engine %s ran %d sequences", what(), e.name, e.util.RunningPeak)
				}
			}
			t.Logf("%s: %v, %d withdrawn, %d cancelled running", what(), n, f.c.timeoutsQueued, f.c.timeoutsRunning)
		}
	}
}
