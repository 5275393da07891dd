// Package policy is the one registry of scheduling policies. Adding a policy
// means adding its package under scheduler/policy/<name> (a type that
// implements scheduler.Policy, and scheduler.Preemptor if it preempts: all
// that makes the policy different lives there) and one line to registered
// below; the conformance suite then tests it too, the preemption half
// included.
package policy

import (
	"fmt"
	"sort"
	"strings"

	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/policy/edf"
	"github.com/llmesh/llmesh/scheduler/policy/fifo"
	"github.com/llmesh/llmesh/scheduler/policy/preemptive"
	"github.com/llmesh/llmesh/scheduler/policy/priority"
)

// registered is the single list of policies.
var registered = []scheduler.Policy{
	fifo.New(),
	priority.New(),
	preemptive.New(),
	edf.New(),
}

var byName = index(registered)

func index(ps []scheduler.Policy) map[string]scheduler.Policy {
	m := map[string]scheduler.Policy{}
	for _, p := range ps {
		if _, dup := m[p.Name()]; dup {
			panic("scheduler/policy: duplicate policy " + p.Name())
		}
		m[p.Name()] = p
	}
	return m
}

// Lookup returns the policy registered under name.
func Lookup(name string) (scheduler.Policy, error) {
	if p, ok := byName[name]; ok {
		return p, nil
	}
	return nil, fmt.Errorf("unknown scheduling policy %q (known: %s)", name, strings.Join(Names(), ", "))
}

// Names lists the registered policies, sorted.
func Names() []string {
	out := make([]string, 0, len(byName))
	for n := range byName {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// All returns every registered policy in registry order.
func All() []scheduler.Policy { return append([]scheduler.Policy(nil), registered...) }
