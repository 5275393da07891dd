package scheduler

import "time"

// Cost-aware preemption. A preemption is worth making only when what the
// urgent request gains is more than what the victim loses:
//
//   - The urgent request w, short of a slot, would wait `wait` (the soonest
//     natural finish) and is late by wait − slack, where slack is what its
//     TTFT budget leaves after the time it has waited and its predicted
//     prefill. Preempting gives it a slot now, so the gain is the lateness
//     avoided: wait − max(0, slack). When waiting is within the objective
//     (slack ≥ wait) there is no gain and nothing is preempted (atRisk).
//   - A victim v loses its sunk work: the engine must compute its prompt
//     (and its generated tokens) again. Its recompute time is its sunk
//     tokens times the pool's observed prefill time per prompt token. A
//     victim is eligible only while its recompute is less than the gain,
//     and the victims chosen for one request must together cost less.
//   - A request predicted to finish within the wait that a preemption
//     itself takes (the abort lands at the end of the engine step in
//     flight: one step, the pool's observed time per output token) frees
//     its slot by itself as soon; it is never a victim.
//   - In an overloaded pool (tune.go) the engine has no idle time in which
//     a recompute is made up: it is throughput the less urgent backlog
//     loses for good, and the lateness of every request behind it. A
//     victim with anything sunk is then not eligible, whatever the gain.
//
// Among eligible victims the cheapest recompute goes first, then the one
// farthest from finishing, then the design's order (no first token yet →
// fewest generated tokens → lowest priority → most recently admitted).
// Without prompt sizes (PromptTokens 0) every recompute is zero and the
// rules reduce to the design's victim order. This file holds the estimates;
// the preemptive policy applies the rules (scheduler/policy/preemptive:
// worth, costOrder).

// observed is what a pool has learned about its engine beyond the moving
// averages in pool: prefill time per prompt token, from the first tokens
// it saw.
type observed struct {
	prefillTime   ewma // admit → first token, of requests with a known prompt size
	prefillPrompt ewma // their prompt tokens (as a Duration count)
	// urgentArrivals and finishes (of every class) feed the derived
	// reserve (tune.go).
	urgentArrivals rate
	finishes       rate
	otherPrompt    ewma // prompt tokens of the other classes' arrivals
	// prefilled is the pool's prefill throughput: prompt tokens of
	// requests that reached their first token, per second (tune.go).
	prefilled tokenRate
	// overloaded: a less urgent request has waited past the overload
	// release factor × its class's TTFT objective (tune.go); set at every
	// step.
	overloaded bool
}

// firstToken records that a request with prompt prompt tokens, admitted
// took ago, produced its first token at now.
func (o *observed) firstToken(now time.Time, prompt int, took time.Duration) {
	if prompt <= 0 || took < 0 {
		return
	}
	o.prefillTime.observe(took)
	o.prefillPrompt.observe(time.Duration(prompt))
	o.prefilled.add(now, prompt)
}

// perToken is the observed prefill time per prompt token; 0 before any
// observation (recompute then counts as free, as before).
func (o *observed) perToken() time.Duration {
	if !o.prefillPrompt.known || o.prefillPrompt.v <= 0 {
		return 0
	}
	return time.Duration(o.prefillTime.v / o.prefillPrompt.v)
}

// sunk estimates the tokens the engine holds for running request r: prompt
// and generated tokens once it produced a token, else the share of its
// prompt that its time since admission covers at the observed prefill
// speed (all of it once that time is past).
func (m *Machine) sunk(now time.Time, p *pool, r *entry) int {
	if r.firstToken {
		return r.req.PromptTokens + r.tokens
	}
	pt := p.obs.perToken()
	if pt <= 0 || r.req.PromptTokens == 0 {
		return 0
	}
	return min(r.req.PromptTokens, int(now.Sub(r.admitted)/pt))
}

// recompute is the engine time preempting r throws away: its sunk tokens,
// less the computed part of its prompt that its engine's prefix cache
// keeps (in a pool that routes by prefix, the prompt blocks booked for it
// at admission; it resumes there, where they hit, as the picker prefers
// the endpoint holding its prefix).
func (m *Machine) recompute(now time.Time, p *pool, r *entry) time.Duration {
	s := m.sunk(now, p, r)
	if c := r.cachedPrompt; c > 0 {
		s -= min(c, s)
	}
	pt := p.obs.perToken()
	if s == 0 || pt <= 0 {
		return 0
	}
	if pt > forever/time.Duration(s) {
		return forever
	}
	return time.Duration(s) * pt
}

// gain is the lateness the urgent request w avoids when a slot is freed for
// it now instead of after wait.
func (m *Machine) gain(now time.Time, p *pool, w *entry, wait time.Duration) time.Duration {
	slack := m.budget(p, w) - now.Sub(w.Arrival) - m.prefillFor(p, w.req.PromptTokens)
	return wait - max(0, slack)
}

// budget is w's TTFT objective scaled by the pool's preemption target,
// and for a pool that derives its bounds, lowered to twice w's predicted
// prefill (tune.go).
func (m *Machine) budget(p *pool, w *entry) time.Duration {
	b := w.class.TTFT
	if t := p.Preemption.Target; t > 0 && t < 1 {
		b = time.Duration(float64(b) * t)
	}
	if m.tuned(p) && w.Priority == m.top && !p.obs.overloaded {
		b = deriveBudget(b, m.prefillFor(p, w.req.PromptTokens))
	}
	return b
}
