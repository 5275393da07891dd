package scheduler_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/policy/fifo"
	"github.com/llmesh/llmesh/scheduler/policy/preemptive"
	"github.com/llmesh/llmesh/scheduler/policy/priority"
)

var t0 = time.Unix(1_700_000_000, 0)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

// twoClasses is an interactive class (priority 0, TTFT 200ms) and a
// preemptible batch class (priority 10, TTFT 5s, TPOT 100ms).
func twoClasses() []scheduler.ClassConfig {
	return []scheduler.ClassConfig{
		{Name: "interactive", Priority: 0, TTFT: 200 * time.Millisecond, TPOT: 30 * time.Millisecond},
		{Name: "batch", Priority: 10, TTFT: 5 * time.Second, TPOT: 100 * time.Millisecond, Preemptible: true},
	}
}

func newMachine(t *testing.T, pc scheduler.PoolConfig, classes ...scheduler.ClassConfig) *scheduler.Machine {
	t.Helper()
	if pc.Name == "" {
		pc.Name = "p"
	}
	if len(classes) == 0 {
		classes = twoClasses()
	}
	m, err := scheduler.NewMachine(scheduler.Config{Pools: []scheduler.PoolConfig{pc}, Classes: classes})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func arrive(t *testing.T, m *scheduler.Machine, now time.Time, r scheduler.Request) scheduler.Ticket {
	t.Helper()
	tk, err := m.Arrive(now, r)
	if err != nil {
		t.Fatalf("Arrive(%+v): %v", r, err)
	}
	return tk
}

func TestValidateNamesFields(t *testing.T) {
	cfg := scheduler.Config{
		Pools:        []scheduler.PoolConfig{{Name: "a", MaxInflight: 0}, {Name: "a", MaxInflight: 1, Policy: fifo.New(), BatchWindow: -1}},
		Classes:      []scheduler.ClassConfig{{Name: "x", TTFT: -time.Second}, {Name: "x"}},
		DefaultClass: "nope",
	}
	err := cfg.Validate()
	for _, want := range []string{
		"pools[0].max_inflight: 0 must be at least 1", "pools[0].policy: must be set",
		`pools[1].name: duplicate pool "a"`, "pools[1].batch_window", "classes[0].slo.ttft",
		`classes[1].name: duplicate class "x"`, `default_class: "nope"`,
	} {
		if err == nil || !contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want it to mention %q", err, want)
		}
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

func TestArriveRejections(t *testing.T) {
	classes := twoClasses()
	classes[1].MaxQueue = 1
	m := newMachine(t, scheduler.PoolConfig{MaxInflight: 1, MaxInflightTokens: 100, Policy: fifo.New()}, classes...)
	if _, err := m.Arrive(at(0), scheduler.Request{Pool: "nope"}); !errors.Is(err, scheduler.ErrRejected) {
		t.Errorf("unknown pool: %v, want ErrRejected", err)
	}
	if _, err := m.Arrive(at(0), scheduler.Request{PromptTokens: 90, MaxTokens: 20}); !errors.Is(err, scheduler.ErrRejected) || !contains(err.Error(), "max_inflight_tokens") {
		t.Errorf("too big: %v, want ErrRejected naming max_inflight_tokens", err)
	}
	arrive(t, m, at(0), scheduler.Request{Class: "batch"})
	m.Step(at(0))                                          // admits it
	arrive(t, m, at(0), scheduler.Request{Class: "batch"}) // fills the class queue
	if _, err := m.Arrive(at(0), scheduler.Request{Class: "batch"}); !errors.Is(err, scheduler.ErrQueueFull) {
		t.Errorf("queue full: %v, want ErrQueueFull", err)
	}
	// Requeues bypass the queue limit.
	arrive(t, m, at(0), scheduler.Request{Class: "batch", Requeue: true})
}

func TestUnknownClassIsDefault(t *testing.T) {
	m, err := scheduler.NewMachine(scheduler.Config{
		Pools:        []scheduler.PoolConfig{{Name: "p", MaxInflight: 1, Policy: priority.New()}},
		Classes:      twoClasses(),
		DefaultClass: "batch",
	})
	if err != nil {
		t.Fatal(err)
	}
	arrive(t, m, at(0), scheduler.Request{Class: "spoofed"})
	if got := m.Stats()[0].Queued["batch"]; got != 1 {
		t.Errorf("queued batch = %d, want 1", got)
	}
}

func TestMaxWaitRejects(t *testing.T) {
	classes := twoClasses()
	classes[1].MaxWait = time.Second
	m := newMachine(t, scheduler.PoolConfig{MaxInflight: 1, Policy: fifo.New()}, classes...)
	a := arrive(t, m, at(0), scheduler.Request{Class: "batch"})
	b := arrive(t, m, at(100), scheduler.Request{Class: "batch"})
	d := m.Step(at(100))
	if diff := cmp.Diff([]scheduler.Ticket{a}, d.Admitted); diff != "" {
		t.Fatalf("admitted (-want +got):\n%s", diff)
	}
	if !d.Wake.Equal(at(1100)) {
		t.Fatalf("wake = %v, want %v", d.Wake, at(1100))
	}
	d = m.Step(at(1100))
	if len(d.Rejected) != 1 || d.Rejected[0].Ticket != b || !errors.Is(d.Rejected[0].Err, scheduler.ErrRejected) ||
		!contains(d.Rejected[0].Err.Error(), "max_wait") {
		t.Fatalf("rejected = %+v, want %d with ErrRejected naming max_wait", d.Rejected, b)
	}
}

func TestBatchWindowReleasesTogether(t *testing.T) {
	m := newMachine(t, scheduler.PoolConfig{MaxInflight: 8, Policy: fifo.New(), BatchWindow: 50 * time.Millisecond})
	a := arrive(t, m, at(0), scheduler.Request{})
	d := m.Step(at(0))
	if diff := cmp.Diff([]scheduler.Ticket{a}, d.Admitted); diff != "" {
		t.Fatalf("first release (-want +got):\n%s", diff)
	}
	b := arrive(t, m, at(10), scheduler.Request{})
	if d = m.Step(at(10)); len(d.Admitted) != 0 || !d.Wake.Equal(at(50)) {
		t.Fatalf("inside window: admitted %v wake %v, want none and %v", d.Admitted, d.Wake, at(50))
	}
	c := arrive(t, m, at(30), scheduler.Request{})
	if d = m.Step(at(30)); len(d.Admitted) != 0 {
		t.Fatalf("inside window admitted %v", d.Admitted)
	}
	d = m.Step(at(50))
	if diff := cmp.Diff([]scheduler.Ticket{b, c}, d.Admitted); diff != "" {
		t.Fatalf("window tick (-want +got):\n%s", diff)
	}
}

func TestTokenCapacityBlocksHead(t *testing.T) {
	m := newMachine(t, scheduler.PoolConfig{MaxInflight: 8, MaxInflightTokens: 100, Policy: fifo.New()})
	a := arrive(t, m, at(0), scheduler.Request{PromptTokens: 50, MaxTokens: 10})
	b := arrive(t, m, at(1), scheduler.Request{PromptTokens: 50, MaxTokens: 10})
	c := arrive(t, m, at(2), scheduler.Request{PromptTokens: 10})
	d := m.Step(at(2))
	// b does not fit next to a, and c may not overtake it.
	if diff := cmp.Diff([]scheduler.Ticket{a}, d.Admitted); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	m.Finish(at(3), a, scheduler.Done)
	d = m.Step(at(3))
	if diff := cmp.Diff([]scheduler.Ticket{b, c}, d.Admitted); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	if s := m.Stats()[0]; s.InFlightTokens != 70 || s.InFlight != 2 {
		t.Fatalf("in flight %d tokens %d, want 2 and 70", s.InFlight, s.InFlightTokens)
	}
}

func TestRequeueGoesToFrontOfClass(t *testing.T) {
	m := newMachine(t, scheduler.PoolConfig{MaxInflight: 1, Policy: priority.New()})
	run := arrive(t, m, at(0), scheduler.Request{Class: "batch"})
	m.Step(at(0))
	b1 := arrive(t, m, at(1), scheduler.Request{Class: "batch"})
	rq := arrive(t, m, at(2), scheduler.Request{Class: "batch", Requeue: true, Arrival: at(-5)})
	m.Finish(at(3), run, scheduler.Done)
	d := m.Step(at(3))
	if diff := cmp.Diff([]scheduler.Ticket{rq}, d.Admitted); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	m.Finish(at(4), rq, scheduler.Done)
	if d = m.Step(at(4)); len(d.Admitted) != 1 || d.Admitted[0] != b1 {
		t.Fatalf("admitted %v, want [%d]", d.Admitted, b1)
	}
}

func TestAgingLiftsPriority(t *testing.T) {
	m := newMachine(t, scheduler.PoolConfig{MaxInflight: 1, Policy: priority.New(), Aging: 100 * time.Millisecond})
	run := arrive(t, m, at(0), scheduler.Request{Class: "batch"})
	m.Step(at(0))
	lo := arrive(t, m, at(0), scheduler.Request{Class: "batch"})
	hi := arrive(t, m, at(1095), scheduler.Request{Class: "interactive"})
	// At 1100ms lo has waited 11 agings: effective priority 10-11 = -1 < 0.
	m.Finish(at(1100), run, scheduler.Done)
	d := m.Step(at(1100))
	if diff := cmp.Diff([]scheduler.Ticket{lo}, d.Admitted); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	_ = hi
}

func TestTokensMatterOnlyToPreemption(t *testing.T) {
	for _, tc := range []struct {
		pol  scheduler.Policy
		want bool
	}{{fifo.New(), false}, {priority.New(), false}, {preemptive.New(), true}} {
		m, err := scheduler.NewMachine(scheduler.Config{Pools: []scheduler.PoolConfig{{Name: "gpu", MaxInflight: 4, Policy: tc.pol}},
			Classes: []scheduler.ClassConfig{{Name: "standard"}}, DefaultClass: "standard"})
		if err != nil {
			t.Fatal(err)
		}
		if got := m.TokensMatter("gpu"); got != tc.want {
			t.Errorf("%s: TokensMatter = %v, want %v", tc.pol.Name(), got, tc.want)
		}
		if !m.TokensMatter("other") {
			t.Errorf("%s: an unknown pool's tokens do not matter", tc.pol.Name())
		}
	}
}

// TestWarmChangesNothing: Warm reads a ticket's entry (its tokens so far,
// 0 for an unknown ticket) and leaves the machine as it was.
func TestWarmChangesNothing(t *testing.T) {
	m := newMachine(t, scheduler.PoolConfig{MaxInflight: 1, Policy: preemptive.New()})
	tk := arrive(t, m, at(0), scheduler.Request{Class: "batch", Pool: "p", PromptTokens: 100, MaxTokens: 10})
	waiting := arrive(t, m, at(0), scheduler.Request{Class: "batch", Pool: "p", PromptTokens: 100, MaxTokens: 10})
	if d := m.Step(at(0)); len(d.Admitted) != 1 {
		t.Fatalf("admitted %d, want 1", len(d.Admitted))
	}
	m.Progress(at(10), tk, scheduler.Progress{FirstToken: true, Tokens: 3})
	before := m.Stats()
	if got := m.Warm(tk); got != 3 {
		t.Errorf("Warm(running) = %d, want its 3 tokens", got)
	}
	if got := m.Warm(waiting) + m.Warm(tk+1000); got != 0 {
		t.Errorf("Warm(waiting) + Warm(unknown) = %d, want 0", got)
	}
	if diff := cmp.Diff(before, m.Stats()); diff != "" {
		t.Errorf("Warm changed the stats (-before +after):\n%s", diff)
	}
}
