package scheduler_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/llmesh/llmesh/clock"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/policy/preemptive"
)

// endpointPool is a preemptive pool of max_inflight 10 over endpoints a
// and b with the given limits, so the endpoints, not the pool, bound it.
func endpointPool(a, b int) scheduler.PoolConfig {
	pc := preemptivePool(10, rails)
	pc.Endpoints = []scheduler.EndpointConfig{{Name: "a:1", MaxInflight: a}, {Name: "b:1", MaxInflight: b}}
	return pc
}

func endpointOf(t *testing.T, m *scheduler.Machine, tk scheduler.Ticket) string {
	t.Helper()
	ep, ok := m.EndpointOf(tk)
	if !ok {
		t.Fatalf("ticket %d is not running", tk)
	}
	return ep
}

func inflightByEndpoint(m *scheduler.Machine) map[string]int {
	out := map[string]int{}
	for _, e := range m.Stats()[0].Endpoints {
		out[e.Name] = e.InFlight
	}
	return out
}

func TestEndpointLimitsBoundAdmission(t *testing.T) {
	m := newMachine(t, endpointPool(2, 1))
	for i := 0; i < 5; i++ {
		arrive(t, m, at(0), scheduler.Request{Class: "batch", MaxTokens: 100})
	}
	d := m.Step(at(0))
	if len(d.Admitted) != 3 {
		t.Fatalf("admitted %v, want 3 (endpoint limits 2 + 1 under a pool limit of 10)", d.Admitted)
	}
	if diff := cmp.Diff(map[string]int{"a:1": 2, "b:1": 1}, inflightByEndpoint(m)); diff != "" {
		t.Fatalf("in flight by endpoint (-want +got):\n%s", diff)
	}
	// A slot freed on b goes to the next waiting request, bound to b.
	for _, tk := range d.Admitted {
		if endpointOf(t, m, tk) == "b:1" {
			m.Finish(at(1), tk, scheduler.Done)
		}
	}
	d = m.Step(at(1))
	if len(d.Admitted) != 1 || endpointOf(t, m, d.Admitted[0]) != "b:1" {
		t.Fatalf("after a release on b admitted %v", d.Admitted)
	}
}

func TestEndpointDefaultLimitSplitsThePool(t *testing.T) {
	pc := preemptivePool(5, rails)
	pc.Endpoints = []scheduler.EndpointConfig{{Name: "a:1"}, {Name: "b:1"}}
	m := newMachine(t, pc)
	got := map[string]int{}
	for _, e := range m.Stats()[0].Endpoints {
		got[e.Name] = e.Limit
	}
	if diff := cmp.Diff(map[string]int{"a:1": 3, "b:1": 3}, got); diff != "" {
		t.Fatalf("limits (-want +got):\n%s", diff)
	}
	for i := 0; i < 7; i++ {
		arrive(t, m, at(0), scheduler.Request{Class: "batch"})
	}
	if d := m.Step(at(0)); len(d.Admitted) != 5 {
		t.Fatalf("admitted %d, want the pool's 5", len(d.Admitted))
	}
}

func TestEndpointPickerScore(t *testing.T) {
	m := newMachine(t, endpointPool(4, 4))
	// a reports a busy engine (traffic from elsewhere): b has the lower
	// score and takes requests until the scores cross.
	if err := m.SetEndpointLoad("p", "a:1", scheduler.EndpointLoad{Running: 2, Waiting: 1, KVUsage: 0.5}); err != nil {
		t.Fatal(err)
	}
	var got []string
	for i := 0; i < 4; i++ {
		tk := arrive(t, m, at(i), scheduler.Request{Class: "batch"})
		m.Step(at(i))
		got = append(got, endpointOf(t, m, tk))
	}
	// Scores: a = (2+1)/4 + 0.5 = 1.25; b = 0/4, 1/4, 2/4, 3/4, 4/4 (full).
	if diff := cmp.Diff([]string{"b:1", "b:1", "b:1", "b:1"}, got); diff != "" {
		t.Fatalf("endpoints (-want +got):\n%s", diff)
	}
	tk := arrive(t, m, at(5), scheduler.Request{Class: "batch"})
	m.Step(at(5))
	if ep := endpointOf(t, m, tk); ep != "a:1" {
		t.Fatalf("with b full went to %s", ep)
	}
	if err := m.SetEndpointLoad("p", "c:1", scheduler.EndpointLoad{}); err == nil {
		t.Fatal("SetEndpointLoad of an unknown endpoint succeeded")
	}
}

func TestEndpointAffinityKeepsAKeyTogether(t *testing.T) {
	pc := endpointPool(3, 3)
	pc.Endpoints = append(pc.Endpoints, scheduler.EndpointConfig{Name: "c:1", MaxInflight: 3})
	m := newMachine(t, pc)
	first := map[string]string{}
	spilled := 0
	for i := 0; i < 9; i++ {
		key := fmt.Sprint("session-", i%3)
		tk := arrive(t, m, at(i), scheduler.Request{Class: "batch", Affinity: key})
		m.Step(at(i))
		ep := endpointOf(t, m, tk)
		if f, ok := first[key]; !ok {
			first[key] = ep
		} else if f != ep {
			spilled++ // its endpoint was full
		}
	}
	// Three keys, three requests each, limits 3: keys that share an
	// endpoint spill; all nine fit.
	if s := m.Stats()[0]; s.InFlight != 9 {
		t.Fatalf("in flight %d, want 9", s.InFlight)
	}
	byEp := map[string]int{}
	for _, ep := range first {
		byEp[ep]++
	}
	if len(byEp) == 3 && spilled != 0 {
		t.Fatalf("keys on distinct endpoints spilled %d times", spilled)
	}
	// The same key goes where it went before while there is room.
	m2 := newMachine(t, pc)
	for i := 0; i < 3; i++ {
		tk := arrive(t, m2, at(i), scheduler.Request{Class: "batch", Affinity: "session-0"})
		m2.Step(at(i))
		if ep := endpointOf(t, m2, tk); ep != first["session-0"] {
			t.Fatalf("session-0 request %d went to %s, first to %s", i, ep, first["session-0"])
		}
	}
}

func TestEndpointDrainedGetsNothingNew(t *testing.T) {
	m := newMachine(t, endpointPool(2, 2))
	a := arrive(t, m, at(0), scheduler.Request{Class: "batch"})
	m.Step(at(0))
	if err := m.SetEndpointHealth("p", endpointOf(t, m, a), false); err != nil {
		t.Fatal(err)
	}
	drained := endpointOf(t, m, a)
	var tks []scheduler.Ticket
	for i := 0; i < 4; i++ {
		tks = append(tks, arrive(t, m, at(1), scheduler.Request{Class: "batch"}))
	}
	d := m.Step(at(1))
	if len(d.Admitted) != 2 {
		t.Fatalf("admitted %v with one endpoint drained, want 2", d.Admitted)
	}
	for _, tk := range d.Admitted {
		if endpointOf(t, m, tk) == drained {
			t.Fatalf("ticket %d admitted to drained %s", tk, drained)
		}
	}
	// What ran there goes on and is released normally; the freed slot
	// stays unused until the endpoint is back.
	m.Finish(at(2), a, scheduler.Done)
	if d = m.Step(at(2)); len(d.Admitted) != 0 {
		t.Fatalf("admitted %v into a drained endpoint", d.Admitted)
	}
	if err := m.SetEndpointHealth("p", drained, true); err != nil {
		t.Fatal(err)
	}
	if d = m.Step(at(3)); len(d.Admitted) != 2 || endpointOf(t, m, d.Admitted[0]) != drained {
		t.Fatalf("after recovery admitted %v", d.Admitted)
	}
}

func TestEndpointLearnedLimit(t *testing.T) {
	m := newMachine(t, endpointPool(3, 3))
	if err := m.SetEndpointLimit("p", "a:1", 1); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 6; i++ {
		arrive(t, m, at(0), scheduler.Request{Class: "batch"})
	}
	m.Step(at(0))
	if diff := cmp.Diff(map[string]int{"a:1": 1, "b:1": 3}, inflightByEndpoint(m)); diff != "" {
		t.Fatalf("in flight (-want +got):\n%s", diff)
	}
	// Clamped to the static limit.
	if err := m.SetEndpointLimit("p", "a:1", 100); err != nil {
		t.Fatal(err)
	}
	m.Step(at(1))
	if diff := cmp.Diff(map[string]int{"a:1": 3, "b:1": 3}, inflightByEndpoint(m)); diff != "" {
		t.Fatalf("in flight after raise (-want +got):\n%s", diff)
	}
}

// TestPreemptVictimOnUrgentEndpoint: both endpoints are full (the pool
// itself has room). The victim must be on the endpoint the urgent request
// is then admitted to, and that endpoint is the one with the cheapest
// victim.
func TestPreemptVictimOnUrgentEndpoint(t *testing.T) {
	m := newMachine(t, endpointPool(2, 2))
	b := fillBatch(t, m, 4)
	// Every victim has its first token; the one with fewest tokens is on
	// the endpoint that b[0] is not on.
	for i, tk := range b {
		m.Progress(at(5), tk, scheduler.Progress{FirstToken: true, Tokens: 50 + i})
	}
	var cheap scheduler.Ticket
	for _, tk := range b[1:] {
		if endpointOf(t, m, tk) != endpointOf(t, m, b[0]) {
			cheap = tk
			break
		}
	}
	// Reported at the first token's time, so no decode speed is observed
	// (the class TPOT prior keeps every victim far from done).
	m.Progress(at(5), cheap, scheduler.Progress{FirstToken: true, Tokens: 10})
	m.Progress(at(5), b[0], scheduler.Progress{FirstToken: true, Tokens: 90})
	urgent := arrive(t, m, at(10), scheduler.Request{Class: "interactive", MaxTokens: 10})
	d := m.Step(at(10))
	if len(d.Preempted) != 1 {
		t.Fatalf("preempted %v, want one victim (endpoints full, pool not)", d.Preempted)
	}
	victim := d.Preempted[0]
	victimEp := endpointOf(t, m, victim)
	m.Finish(at(11), victim, scheduler.Preempted)
	d = m.Step(at(11))
	if len(d.Admitted) != 1 || d.Admitted[0] != urgent {
		t.Fatalf("admitted %v, want the urgent request", d.Admitted)
	}
	if got := endpointOf(t, m, urgent); got != victimEp {
		t.Fatalf("urgent request admitted to %s, its victim was on %s", got, victimEp)
	}
}

// TestPreemptNotOnDrainedEndpoint: the cheapest victim overall runs on a
// drained endpoint, where its slot is of no use; the victim must come from
// the endpoint the urgent request can use.
func TestPreemptNotOnDrainedEndpoint(t *testing.T) {
	m := newMachine(t, endpointPool(2, 2))
	b := fillBatch(t, m, 4)
	drained := endpointOf(t, m, b[0])
	for _, tk := range b {
		n := 80
		if endpointOf(t, m, tk) == drained {
			n = 1 // the cheapest victims are on the drained endpoint
		}
		m.Progress(at(5), tk, scheduler.Progress{FirstToken: true, Tokens: n})
	}
	if err := m.SetEndpointHealth("p", drained, false); err != nil {
		t.Fatal(err)
	}
	urgent := arrive(t, m, at(10), scheduler.Request{Class: "interactive", MaxTokens: 10})
	d := m.Step(at(10))
	if len(d.Preempted) != 1 {
		t.Fatalf("preempted %v, want one", d.Preempted)
	}
	if ep := endpointOf(t, m, d.Preempted[0]); ep == drained {
		t.Fatalf("victim %d on drained endpoint %s", d.Preempted[0], ep)
	}
	m.Finish(at(11), d.Preempted[0], scheduler.Preempted)
	if d = m.Step(at(11)); len(d.Admitted) != 1 || d.Admitted[0] != urgent {
		t.Fatalf("admitted %v, want the urgent request", d.Admitted)
	}
}

func TestEndpointValidation(t *testing.T) {
	pc := endpointPool(-1, 2)
	pc.Name, pc.Policy = "p", preemptive.New()
	pc.Endpoints = append(pc.Endpoints, scheduler.EndpointConfig{Name: "a:1"})
	cfg := scheduler.Config{Pools: []scheduler.PoolConfig{pc}, Classes: twoClasses()}
	err := cfg.Validate()
	for _, want := range []string{`pools[0].endpoints[0].max_inflight: -1`, `pools[0].endpoints[2].name: duplicate endpoint "a:1"`} {
		if err == nil || !contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want it to contain %q", err, want)
		}
	}
}

func TestSchedulerLeaseCarriesEndpoint(t *testing.T) {
	pc := endpointPool(1, 1)
	pc.Name = "p"
	s, err := scheduler.New(scheduler.Config{Pools: []scheduler.PoolConfig{pc}, Classes: twoClasses()}, clock.NewFake(t0))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got := map[string]bool{}
	var leases []scheduler.Lease
	for i := 0; i < 2; i++ {
		l, err := s.Admit(context.Background(), scheduler.Request{Class: "batch"})
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, l)
		got[scheduler.EndpointOf(l)] = true
	}
	if diff := cmp.Diff(map[string]bool{"a:1": true, "b:1": true}, got); diff != "" {
		t.Fatalf("lease endpoints (-want +got):\n%s", diff)
	}
	if err := s.SetEndpointHealth("p", "a:1", false); err != nil {
		t.Fatal(err)
	}
	for _, l := range leases {
		l.Release(scheduler.Done)
	}
	l, err := s.Admit(context.Background(), scheduler.Request{Class: "batch"})
	if err != nil {
		t.Fatal(err)
	}
	if ep := scheduler.EndpointOf(l); ep != "b:1" {
		t.Fatalf("with a drained admitted to %q", ep)
	}
	l.Release(scheduler.Done)
}

// FuzzMachineEndpoints reads bytes as events on a pool of one to three
// endpoints (arrivals with affinity keys, progress, releases, cancels,
// drains, learned limits, load reports with arbitrary values, time) and
// checks that the machine never panics, never admits to a drained or full
// endpoint, and leaks nothing on any endpoint once drained.
func FuzzMachineEndpoints(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11})
	f.Add([]byte{2, 9, 0, 1, 0, 2, 0, 3, 5, 0, 0, 4, 6, 1, 7, 200, 3, 0, 0, 8})
	f.Add([]byte{1, 0, 0, 0, 0, 1, 0, 2, 8, 0, 8, 1, 9, 255, 0, 5, 3, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 2 {
			return
		}
		n := 1 + int(data[0]%3)
		pc := preemptivePool(1+int(data[1]%8), scheduler.PreemptionConfig{MaxPerRequest: 1 + int(data[0]%2)})
		for i := 0; i < n; i++ {
			pc.Endpoints = append(pc.Endpoints, scheduler.EndpointConfig{Name: fmt.Sprint("e", i), MaxInflight: int(data[1]>>4) % 3})
		}
		m := newMachine(t, pc)
		now := t0
		var live []scheduler.Ticket
		next := func(i *int) int {
			if *i >= len(data) {
				return 0
			}
			*i++
			return int(data[*i-1])
		}
		for i := 2; i < len(data); {
			op, arg := next(&i), next(&i)
			var tk scheduler.Ticket
			if len(live) > 0 {
				tk = live[arg%len(live)]
			}
			ep := fmt.Sprint("e", arg%(n+1)) // sometimes an unknown endpoint
			switch op % 10 {
			case 0, 1:
				r := scheduler.Request{ID: fmt.Sprint(arg % 5), Class: []string{"interactive", "batch"}[arg%2], MaxTokens: arg,
					Requeue: op%4 == 1}
				if arg%3 == 0 {
					r.Affinity = fmt.Sprint("k", arg%4)
				}
				if t, err := m.Arrive(now, r); err == nil {
					live = append(live, t)
				}
			case 2:
				m.Progress(now, tk, scheduler.Progress{FirstToken: true, Tokens: arg})
			case 3:
				m.Finish(now, tk, scheduler.Outcome(arg%4))
			case 4:
				m.Cancel(now, tk)
			case 5:
				_ = m.SetEndpointHealth("p", ep, arg%2 == 0)
			case 6:
				_ = m.SetEndpointLimit("p", ep, arg-2)
			case 7:
				_ = m.SetEndpointLoad("p", ep, scheduler.EndpointLoad{Running: arg - 100, Waiting: arg * 1000, KVUsage: float64(arg)/100 - 1})
			default:
				now = now.Add(time.Duration(arg) * time.Millisecond)
			}
			before := map[string]int{}
			for _, e := range m.Stats()[0].Endpoints {
				before[e.Name] = e.InFlight
			}
			d := m.Step(now)
			got := map[string]int{}
			for _, a := range d.Admitted {
				name, ok := m.EndpointOf(a)
				if !ok {
					t.Fatalf("admitted ticket %d has no endpoint", a)
				}
				got[name]++
			}
			for _, e := range m.Stats()[0].Endpoints {
				if got[e.Name] > 0 && (e.Drained || e.InFlight > e.Limit || before[e.Name]+got[e.Name] != e.InFlight) {
					t.Fatalf("admitted %d to endpoint %+v (%d before)", got[e.Name], e, before[e.Name])
				}
			}
			for _, v := range d.Preempted {
				if arg%2 == 0 {
					m.Finish(now, v, scheduler.Preempted)
				}
			}
		}
		for _, tk := range live {
			m.Finish(now, tk, scheduler.Done)
		}
		m.Step(now)
		s := m.Stats()[0]
		for _, e := range s.Endpoints {
			if e.InFlight != 0 || e.Preempting != 0 {
				t.Fatalf("endpoint leak after drain: %+v", e)
			}
		}
		if s.InFlight != 0 || s.Preempting != 0 {
			t.Fatalf("leak after drain: %+v", s)
		}
	})
}

// The prefill bound is per endpoint (an engine prefills only its own
// prompts), and an urgent request goes to the endpoint with the least
// prefill outstanding.
func TestEndpointPrefillBound(t *testing.T) {
	pc := endpointPool(4, 4)
	pc.MaxPrefillTokens = 2000 // 1000 per endpoint
	pc.StaticBounds = true
	m := newMachine(t, pc)
	first := arrive(t, m, at(0), scheduler.Request{Class: "batch", PromptTokens: 800, MaxTokens: 10})
	if d := m.Step(at(0)); len(d.Admitted) != 1 {
		t.Fatalf("admitted %v", d.Admitted)
	}
	busy := endpointOf(t, m, first)
	// 800 + 800 fits the pool's 2000 but not one endpoint's 1000: the
	// second prompt goes to the other endpoint, the third waits.
	second := arrive(t, m, at(1), scheduler.Request{Class: "batch", PromptTokens: 800, MaxTokens: 10})
	arrive(t, m, at(1), scheduler.Request{Class: "batch", PromptTokens: 300, MaxTokens: 10})
	d := m.Step(at(1))
	if len(d.Admitted) != 1 || d.Admitted[0] != second || endpointOf(t, m, second) == busy {
		t.Fatalf("admitted %v; want only the second prompt, on the endpoint other than %s", d.Admitted, busy)
	}
	// The first prompt's first token frees its endpoint's prefill budget.
	m.Progress(at(2), first, scheduler.Progress{FirstToken: true, Tokens: 1})
	d = m.Step(at(2))
	if len(d.Admitted) != 1 || endpointOf(t, m, d.Admitted[0]) != busy {
		t.Fatalf("after the first token admitted %v, want one on %s", d.Admitted, busy)
	}
	// An urgent request is not held by the bound and goes where the least
	// prefill is outstanding: busy has 100 tokens, the other 800.
	urgent := arrive(t, m, at(3), scheduler.Request{Class: "interactive", PromptTokens: 5000, MaxTokens: 10})
	d = m.Step(at(3))
	if len(d.Admitted) != 1 || endpointOf(t, m, urgent) != busy {
		t.Fatalf("urgent admitted %v, want it on %s", d.Admitted, busy)
	}
}

// Each endpoint may prefill one prompt larger than its share of the bound
// when it prefills nothing else, whatever the other endpoints hold: the
// pool's sum is not a second bound (long prompts would otherwise leave
// engines without prefill work while the backlog grows).
func TestEndpointPrefillBoundLongPrompts(t *testing.T) {
	pc := endpointPool(4, 4)
	pc.MaxPrefillTokens = 2000 // 1000 per endpoint
	pc.StaticBounds = true
	m := newMachine(t, pc)
	a := arrive(t, m, at(0), scheduler.Request{Class: "batch", PromptTokens: 12000, MaxTokens: 10})
	b := arrive(t, m, at(0), scheduler.Request{Class: "batch", PromptTokens: 12000, MaxTokens: 10})
	c := arrive(t, m, at(0), scheduler.Request{Class: "batch", PromptTokens: 12000, MaxTokens: 10})
	d := m.Step(at(0))
	if len(d.Admitted) != 2 || d.Admitted[0] != a || d.Admitted[1] != b || endpointOf(t, m, a) == endpointOf(t, m, b) {
		t.Fatalf("admitted %v; want the first two long prompts, one on each endpoint", d.Admitted)
	}
	m.Progress(at(1), a, scheduler.Progress{FirstToken: true, Tokens: 1})
	d = m.Step(at(1))
	if len(d.Admitted) != 1 || d.Admitted[0] != c || endpointOf(t, m, c) != endpointOf(t, m, a) {
		t.Fatalf("after a's first token admitted %v; want c on a's endpoint", d.Admitted)
	}
}
