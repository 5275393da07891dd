package scheduler

import (
	"math"
	"time"
)

// Self-tuning admission bounds. A pool whose policy preempts and whose
// config leaves a bound at 0 (and StaticBounds false) derives it from what
// it observes, so that the default config keeps the most urgent class near
// what the engine allows without hand tuning, and follows traffic when it
// shifts:
//
//   - reserve_urgent: a reserved slot, once taken by an urgent request, is
//     free again at the next finish of any request, urgent or not (the
//     others are admitted only below limit − reserve, so a slot a finish
//     frees stays with the reserve). So the reserve runs out only when more
//     than R urgent requests arrive between two finishes. With urgent
//     arrivals at rate λ and finishes at rate μ, the number of urgent
//     arrivals before the next finish is geometric:
//     P(N > r) = q^(r+1), q = λ/(λ+μ). R is the smallest r with
//     q^(r+1) ≤ reserveMiss, at most an eighth of the limit; 0 until both
//     rates are observed.
//   - max_prefill_tokens: the prompt tokens of other classes admitted but not
//     yet prefilled are what an urgent prompt shares its prefill steps with;
//     they may take at most prefillShare of the urgent class's TTFT
//     objective at the observed prefill time per prompt token (cost.go), but
//     never less than the other classes' mean prompt (a smaller bound
//     serializes their prefill), in [minPrefillCap, maxPrefillCap]; 0 until
//     a prefill was observed.
//   - the preemption budget: preemption starts when an urgent request's
//     predicted TTFT passes twice its predicted prefill (queueing no longer
//     than the engine's own part), at least queueShare of the objective and
//     at most the objective times Preemption.Target. The cost rules
//     (cost.go) keep what it preempts cheap.
//
// Overload release: the pool is overloaded while a request of a less
// urgent class has waited more than PoolConfig.OverloadRelease (default
// DefaultOverloadRelease) × its class's TTFT objective: it is not catching
// up on its less urgent work, so every slot, every prefill token and every
// recomputed token taken from that work is throughput it never gets back
// (under a client timeout, timed-out requests: each second the backlog
// loses moves the moment its waits pass the timeout earlier, and every
// request after that moment is lost). Then:
//
//   - the derived reserve is 0: a held slot is a sequence less in the
//     engine's batch;
//   - the derived prefill cap is what the pool prefills in queueShare of
//     the urgent objective at its observed prefill throughput, and at
//     least one engine step's token budget (overloadPrefillCap) per
//     endpoint: a larger backlog of admitted prompts does not make the
//     engines' steps fuller, it only queues in front of the next urgent
//     prompt (with no bound the urgent class waits behind every admitted
//     prompt; with the calm-time bound, about one prompt, prefill is
//     serialized and a prefill-bound engine loses throughput). The
//     throughput term covers an endpoint that is several engines (pool
//     routing), whose steps the pool cannot count;
//   - the preemption budget is the whole objective, and a victim must
//     have nothing sunk (cost.go): a recompute is throughput lost for
//     good.
//
// A class without a TTFT objective never releases.
//
// Static settings override: a bound set above 0 is used as given, and
// StaticBounds keeps 0 meaning off.

const (
	reserveMiss   = 0.1 // share of urgent arrivals the reserve may leave to preemption
	prefillShare  = 0.1
	minPrefillCap = 256
	maxPrefillCap = 8192
	queueShare    = 0.5
	rateAlpha     = 0.05 // rates move slower than the per-request estimates
	// overloadPrefillCap is the prefill cap of an overloaded pool, per
	// endpoint: one engine step's token budget at vLLM's default
	// max_num_batched_tokens, the most prefill one step takes.
	overloadPrefillCap = 8192
)

// DefaultOverloadRelease is PoolConfig.OverloadRelease's default factor.
const DefaultOverloadRelease = 10

// observeOverload sets p's overload flag at now (the rule above).
func (m *Machine) observeOverload(now time.Time, p *pool) {
	p.obs.overloaded = false
	factor := p.OverloadRelease
	if factor == 0 {
		factor = DefaultOverloadRelease
	}
	if !m.tuned(p) || factor < 0 {
		return
	}
	for ci := range p.queues {
		cl := m.classes[ci]
		if cl.Priority == m.top || cl.TTFT <= 0 {
			continue
		}
		if e := p.queues[ci].front(); e != nil && float64(now.Sub(e.Arrival)) > factor*float64(cl.TTFT) {
			p.obs.overloaded = true
			return
		}
	}
}

// rate is an exponentially weighted moving average of the gaps between
// events, read as events per second.
type rate struct {
	last  time.Time
	gap   float64 // seconds
	known bool
	seen  bool
}

func (r *rate) event(now time.Time) {
	if !r.seen {
		r.last, r.seen = now, true
		return
	}
	g := now.Sub(r.last).Seconds()
	r.last = now
	if g < 0 {
		return
	}
	if !r.known {
		r.gap, r.known = g, true
		return
	}
	r.gap += rateAlpha * (g - r.gap)
}

// tokenRate is a moving average of a token count per second, over
// windows of at least tokenWindow.
type tokenRate struct {
	start time.Time
	acc   float64
	v     float64
	known bool
	seen  bool
}

const tokenWindow = time.Second

func (r *tokenRate) add(now time.Time, n int) {
	if !r.seen || now.Before(r.start) {
		r.start, r.acc, r.seen = now, 0, true
	}
	r.acc += float64(n)
	el := now.Sub(r.start)
	if el < tokenWindow {
		return
	}
	x := r.acc / el.Seconds()
	if !r.known {
		r.v, r.known = x, true
	} else {
		r.v += ewmaAlpha * (x - r.v)
	}
	r.start, r.acc = now, 0
}

// perSecond is the observed rate; 0 before a whole window.
func (r *tokenRate) perSecond() float64 { return r.v }

// perSecond is the observed rate; 0 before two events.
func (r *rate) perSecond() float64 {
	if !r.known || r.gap <= 0 {
		if r.known {
			return math.Inf(1)
		}
		return 0
	}
	return 1 / r.gap
}

// arrival records a new (not requeued) request.
func (o *observed) arrival(now time.Time, urgent bool, prompt int) {
	if urgent {
		o.urgentArrivals.event(now)
	} else if prompt > 0 {
		o.otherPrompt.observe(time.Duration(prompt))
	}
}

// finished records a completed request.
func (o *observed) finished(now time.Time) { o.finishes.event(now) }

// deriveReserve is the reserve for urgent arrivals at lambda per second and
// finishes at mu per second on a pool of limit slots.
func deriveReserve(lambda, mu float64, limit int) int {
	if !(lambda > 0) || !(mu > 0) || limit < 2 {
		return 0
	}
	most := max(1, limit/8)
	q := lambda / (lambda + mu)
	if math.IsInf(lambda, 1) {
		return most
	}
	r := 0
	for r < most && math.Pow(q, float64(r+1)) > reserveMiss {
		r++
	}
	return max(1, r)
}

// derivePrefillCap is the prefill bound for an urgent objective ttft at
// perToken prefill time per prompt token.
func derivePrefillCap(ttft, perToken time.Duration) int {
	if ttft <= 0 || perToken <= 0 {
		return 0
	}
	n := int(float64(ttft) * prefillShare / float64(perToken))
	return min(maxPrefillCap, max(minPrefillCap, n))
}

// deriveBudget is the preemption budget of a request with objective ttft
// (already scaled by the target) and predicted prefill.
func deriveBudget(ttft, prefill time.Duration) time.Duration {
	b := 2 * prefill
	return min(ttft, max(b, time.Duration(float64(ttft)*queueShare)))
}

// tuned reports whether p derives its bounds.
func (m *Machine) tuned(p *pool) bool { return !p.StaticBounds && p.pre != nil }

// urgentTTFT is the TTFT objective of the pool's most urgent class (the
// tightest among equals); 0 when none has one.
func (m *Machine) urgentTTFT() time.Duration {
	var t time.Duration
	for _, c := range m.classes {
		if c.Priority == m.top && c.TTFT > 0 && (t == 0 || c.TTFT < t) {
			t = c.TTFT
		}
	}
	return t
}

// reserveFor is the pool's reserve_urgent in effect: the static one, or
// the derived one.
func (m *Machine) reserveFor(p *pool) int {
	r := p.ReserveUrgent
	if r == 0 && m.tuned(p) && !p.obs.overloaded {
		r = deriveReserve(p.obs.urgentArrivals.perSecond(), p.obs.finishes.perSecond(), p.limit)
	}
	return max(0, min(r, p.limit-1))
}

// prefillCap is the pool's max_prefill_tokens in effect (0: no bound).
func (m *Machine) prefillCap(p *pool) int {
	if n := p.MaxPrefillTokens; n > 0 || !m.tuned(p) {
		return n
	}
	if p.obs.overloaded {
		n := overloadPrefillCap * len(p.endpoints)
		if r := p.obs.prefilled.perSecond(); r > 0 {
			n = max(n, int(min(float64(maxTokens), r*queueShare*m.urgentTTFT().Seconds())))
		}
		return n
	}
	n := derivePrefillCap(m.urgentTTFT(), p.obs.perToken())
	if n > 0 && p.obs.otherPrompt.known {
		// Never below the other classes' mean prompt: a smaller bound
		// serializes their prefill, which costs throughput where it is the
		// bottleneck (long prompts).
		n = max(n, min(maxPrefillCap, int(p.obs.otherPrompt.v)))
	}
	// The bound is one engine's: each endpoint prefills its own prompts.
	return n * len(p.endpoints)
}

// Bounds is what a pool's admission bounds are at the moment: static or
// derived (Machine.Bounds).
type Bounds struct {
	ReserveUrgent    int
	MaxPrefillTokens int
	// PreemptionBudget is how long an urgent request whose prefill is the
	// pool's prefill estimate may be predicted to wait for its first token
	// before preemption starts: its class's TTFT objective times
	// Preemption.Target, lowered for a pool that derives its bounds; 0 for
	// a pool whose policy does not preempt or whose most urgent class has
	// no TTFT objective.
	PreemptionBudget time.Duration
	// Derived is true when the pool derives the bounds it was not given.
	Derived bool
}

// Bounds returns the admission bounds pool poolName applies now; the zero
// value for an unknown pool.
func (m *Machine) Bounds(poolName string) Bounds {
	p := m.poolByName[poolName]
	if p == nil {
		return Bounds{}
	}
	return m.bounds(p)
}

func (m *Machine) bounds(p *pool) Bounds {
	return Bounds{ReserveUrgent: m.reserveFor(p), MaxPrefillTokens: m.prefillCap(p), PreemptionBudget: m.urgentBudget(p),
		Derived: m.tuned(p)}
}

// urgentBudget is budget (cost.go) for an urgent request at the pool's
// prefill estimate.
func (m *Machine) urgentBudget(p *pool) time.Duration {
	b := m.urgentTTFT()
	if p.pre == nil || b <= 0 {
		return 0
	}
	if t := p.Preemption.Target; t > 0 && t < 1 {
		b = time.Duration(float64(b) * t)
	}
	if m.tuned(p) && !p.obs.overloaded {
		b = deriveBudget(b, p.prefill.value())
	}
	return b
}
