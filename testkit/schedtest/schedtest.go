// Package schedtest holds the scheduler fixtures that the tests of several
// packages share: a registered policy by name, the one-pool two-class
// config, and admissions run in the background with their results on a
// channel.
package schedtest

import (
	"context"
	"testing"
	"time"

	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/policy"
)

// Policy returns the registered policy name, failing t if there is none.
func Policy(t testing.TB, name string) scheduler.Policy {
	t.Helper()
	p, err := policy.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TwoClasses is a config with one pool "gpu" of maxInflight slots under the
// registered policy policyName, an "urgent" class (priority 0) and a
// "batch" class (priority 10, the default).
func TwoClasses(t testing.TB, policyName string, maxInflight int) scheduler.Config {
	t.Helper()
	return scheduler.Config{
		Pools: []scheduler.PoolConfig{{Name: "gpu", MaxInflight: maxInflight, Policy: Policy(t, policyName)}},
		Classes: []scheduler.ClassConfig{
			{Name: "urgent", Priority: 0},
			{Name: "batch", Priority: 10},
		},
		DefaultClass: "batch",
	}
}

// Admission is the outcome of one background admission.
type Admission struct {
	Name  string // what the caller called it (AdmitInto); empty from Admit
	Lease scheduler.Lease
	Err   error
}

// Admit runs a.Admit(ctx, r) in a goroutine; its outcome arrives on the
// returned channel, which has room for it (the goroutine never blocks).
func Admit(ctx context.Context, a scheduler.Admitter, r scheduler.Request) <-chan Admission {
	ch := make(chan Admission, 1)
	go func() {
		l, err := a.Admit(ctx, r)
		ch <- Admission{Lease: l, Err: err}
	}()
	return ch
}

// AdmitInto runs a.Admit(ctx, r) in a goroutine and sends its outcome,
// named name, on ch, so that several admissions report on one channel in
// the order they finish. The goroutine blocks until ch takes it.
func AdmitInto(ctx context.Context, a scheduler.Admitter, name string, r scheduler.Request, ch chan<- Admission) {
	go func() {
		l, err := a.Admit(ctx, r)
		ch <- Admission{Name: name, Lease: l, Err: err}
	}()
}

// Next waits for the next outcome on ch, failing t after 20 s.
func Next(t testing.TB, ch <-chan Admission) Admission {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(20 * time.Second):
		t.Fatal("no admission result within 20s")
	}
	return Admission{}
}
