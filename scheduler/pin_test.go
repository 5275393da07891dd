package scheduler_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/llmesh/llmesh/scheduler"
)

// A pinned request goes to its endpoint, however the picker would rank
// it, waits while that endpoint is full or drained (even with room
// elsewhere), and counts against that endpoint's limit.
func TestPinBindsToItsEndpoint(t *testing.T) {
	m := newMachine(t, endpointPool(1, 1))
	// Idle: a would win by configuration order; the pin says b.
	tk := arrive(t, m, at(0), scheduler.Request{Class: "batch", Pin: "b:1"})
	if d := m.Step(at(0)); len(d.Admitted) != 1 || endpointOf(t, m, tk) != "b:1" {
		t.Fatalf("pinned to b:1: admitted %v", d.Admitted)
	}
	// b full (its limit 1 counts the pinned request), a free: another
	// request pinned to b waits.
	w := arrive(t, m, at(1), scheduler.Request{Class: "batch", Pin: "b:1"})
	if d := m.Step(at(1)); len(d.Admitted) != 0 {
		t.Fatalf("b full: admitted %v, want the pinned request to wait", d.Admitted)
	}
	if got := inflightByEndpoint(m); got["a:1"] != 0 || got["b:1"] != 1 {
		t.Fatalf("in flight %v", got)
	}
	m.Finish(at(2), tk, scheduler.Done)
	if d := m.Step(at(2)); len(d.Admitted) != 1 || d.Admitted[0] != w || endpointOf(t, m, w) != "b:1" {
		t.Fatalf("b freed: admitted %v", d.Admitted)
	}
	m.Finish(at(3), w, scheduler.Done)
	// Drained: nothing new there, pinned or not, until it is back.
	if err := m.SetEndpointHealth("p", "a:1", false); err != nil {
		t.Fatal(err)
	}
	w2 := arrive(t, m, at(4), scheduler.Request{Class: "batch", Pin: "a:1"})
	if d := m.Step(at(4)); len(d.Admitted) != 0 {
		t.Fatalf("a drained: admitted %v", d.Admitted)
	}
	if err := m.SetEndpointHealth("p", "a:1", true); err != nil {
		t.Fatal(err)
	}
	if d := m.Step(at(5)); len(d.Admitted) != 1 || endpointOf(t, m, w2) != "a:1" {
		t.Fatalf("a back: admitted %v", d.Admitted)
	}
}

func TestPinUnknownEndpointRejected(t *testing.T) {
	m := newMachine(t, endpointPool(1, 1))
	_, err := m.Arrive(at(0), scheduler.Request{Class: "batch", Pin: "c:1"})
	if !errors.Is(err, scheduler.ErrRejected) || !strings.Contains(err.Error(), `pool "p" has no endpoint "c:1"`) {
		t.Fatalf("err = %v, want a rejection naming the endpoint", err)
	}
}

// Preemption for a pinned urgent request takes its victim on the pinned
// endpoint, although the cheapest victim runs on the other one.
func TestPinPreemptsOnItsEndpoint(t *testing.T) {
	m := newMachine(t, endpointPool(2, 2))
	b := fillBatch(t, m, 4)
	var onA, onB []scheduler.Ticket
	for _, tk := range b {
		if endpointOf(t, m, tk) == "a:1" {
			onA = append(onA, tk)
		} else {
			onB = append(onB, tk)
		}
	}
	for _, tk := range onA {
		m.Progress(at(5), tk, scheduler.Progress{FirstToken: true, Tokens: 10})
	}
	for _, tk := range onB {
		m.Progress(at(5), tk, scheduler.Progress{FirstToken: true, Tokens: 1}) // cheapest
	}
	urgent := arrive(t, m, at(10), scheduler.Request{Class: "interactive", MaxTokens: 10, Pin: "a:1"})
	d := m.Step(at(10))
	if len(d.Preempted) != 1 || endpointOf(t, m, d.Preempted[0]) != "a:1" {
		t.Fatalf("preempted %v, want one victim on the pinned a:1", d.Preempted)
	}
	m.Finish(at(11), d.Preempted[0], scheduler.Preempted)
	if d = m.Step(at(11)); len(d.Admitted) != 1 || d.Admitted[0] != urgent || endpointOf(t, m, urgent) != "a:1" {
		t.Fatalf("admitted %v, want the urgent request on a:1", d.Admitted)
	}
}
