package simulate

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/llmesh/llmesh/scheduler/policy"
)

// The fleet loop with one engine, one proxy and no hop is the single
// host's loop: the same records, event for event, for every policy and
// either routing.
func TestFleetOfOneIsTheLoop(t *testing.T) {
	w := testWorkload(t)
	for _, c := range [][2]string{{"fifo", RoutingPool}, {"priority", RoutingEndpointAware}, {"preemptive", RoutingEndpointAware}, {"preemptive", RoutingPool}} {
		name := c[0]
		o := testOptions()
		o.Routing = c[1]
		o, err := o.withDefaults(w)
		if err != nil {
			t.Fatal(err)
		}
		o.SaturationRequests = 300
		sat, err := saturation(o.prepare(w), o)
		if err != nil {
			t.Fatal(err)
		}
		sw := o.prepare(w).ScaleRate(1.3 * sat.RPS / naturalRate(w))
		items, err := collect(sw)
		if err != nil {
			t.Fatal(err)
		}
		pol, err := policy.Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		l, err := newLoop(sw, pol, o)
		if err != nil {
			t.Fatal(err)
		}
		want, err := l.run(items)
		if err != nil {
			t.Fatal(err)
		}
		pol, _ = policy.Lookup(name)
		f, err := newFleet(sw, pol, o)
		if err != nil {
			t.Fatal(err)
		}
		f.stepAll = true
		got, err := f.run(items)
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("%s: fleet of one differs from the loop (-loop +fleet):\n%.3000s", name, d)
		}
		if l.c.preemptions != f.c.preemptions || l.c.recomputed != f.c.recomputed || l.c.computed != f.c.computed {
			t.Errorf("%s: counters loop %+v fleet %+v", name, l.c, f.c)
		}
		t.Logf("%s %s: %d records, %d preemptions", name, o.Routing, len(got), f.c.preemptions)
	}
}
