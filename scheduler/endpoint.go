package scheduler

import (
	"fmt"
	"hash/fnv"
	"math"
	"time"

	"github.com/llmesh/llmesh/kvblock"
)

// Endpoints: a pool is served by one or more engine replicas. Each has its
// own admission limit, its own in-flight count and its own health; an
// admission is bound to one endpoint, and the host sends the request there.
//
// Admission into a pool needs room at the pool level (max_inflight,
// max_inflight_tokens, max_prefill_tokens, reserve_urgent: as without
// endpoints) and on one endpoint that is not drained; the picker chooses
// that endpoint:
//
//  0. A pinned request (Request.Pin: a pick made upstream of the host) goes
//     to its endpoint when that one has room, and otherwise waits; the
//     rules below do not apply to it.
//  1. The endpoint preemption freed for this request (its target), when it
//     has room: the victim's slot goes to the request it was preempted for.
//  2. With an affinity key (Request.Affinity), the endpoint with room that
//     ranks first for the key by rendezvous hashing (the highest FNV-1a hash
//     of key and endpoint name): a conversation stays on the replica that
//     holds its KV cache while that replica has room, and moves to the next
//     in its own stable order when it does not.
//  3. Otherwise the endpoint with room and the lowest load score
//
//     score = (max(in flight, engine running) + engine waiting) / limit + KV usage
//
//     where in flight is what this scheduler admitted there, and engine
//     running, engine waiting and KV usage (0..1) are the endpoint's own
//     report (SetEndpointLoad, from its /metrics; zero when unknown). Ties
//     go to fewer in flight, then to configuration order. A request of the
//     most urgent priority goes first to the endpoint with the fewest
//     prompt tokens admitted there and not yet prefilled (its prefill
//     shares engine steps with them), then by the score.
//
//     In a pool with PrefixRouting, a request that carries its prompt's
//     block hashes (Request.Blocks) scores each endpoint
//
//     score − weight × matched / blocks
//
//     where matched is how many of its leading blocks the pool's prefix
//     index (prefixindex) says were sent to that endpoint, up to the
//     first block that was not: the engine likely still holds them in its
//     prefix cache, and a hit saves their prefill. Every admission records
//     its blocks for the endpoint it is bound to (whichever rule chose
//     it), each endpoint remembering PrefixRouting.CapacityBlocks blocks,
//     least recently used forgotten first, about as its engine's KV cache
//     evicts. A prompt that shares a prefix thus follows it while that
//     endpoint has room and its load does not outweigh the hit; a request
//     without blocks, or a pool without PrefixRouting, is scored as above.
//     This is the approximate prefix scorer of llm-d's inference scheduler
//     and the Gateway API inference extension, inside the admission
//     decision: the endpoint is chosen when a slot is free, with the load
//     the scheduler itself admitted. A request of the most urgent
//     priority compares prefill backlogs less its own likely hit
//     (PromptTokens × matched / blocks) before the score.
//
// The pool's max_prefill_tokens (static, or derived per engine: tune.go)
// is split evenly among the endpoints: a request that is not of the most
// urgent priority goes only to an endpoint whose own outstanding prefill
// leaves room for its prompt (or has none), since an engine prefills only
// its own prompts. Rules 1 and 2 (preemption's target, affinity) are taken
// as they are; the pool-wide bound still applies to them.
//
// Preemption frees capacity on the endpoint the urgent request will use:
// when every endpoint that is not drained is full, the victims are taken
// from one endpoint only, the one whose cheapest victim (in victim order)
// is cheapest, and the urgent request is then admitted there. Victims on a
// drained endpoint, or on one over its (lowered) limit where one victim
// does not make room, are never chosen.

// EndpointConfig is one engine replica of a pool.
type EndpointConfig struct {
	// Name identifies the endpoint within its pool; hosts route by it (it
	// is the replica's host:port).
	Name string
	// MaxInflight is the endpoint's static limit; 0 means the pool's
	// MaxInflight divided evenly among its endpoints (rounded up), so a
	// pool's capacity stays what its max_inflight says.
	MaxInflight int
}

// EndpointLoad is what an endpoint reports about itself (from its
// /metrics); the picker's score uses it.
type EndpointLoad struct {
	// Running and Waiting are the engine's own counts of running and
	// waiting sequences (vllm:num_requests_running, ..._waiting).
	Running, Waiting int
	// KVUsage is the share of the KV cache in use, 0..1.
	KVUsage float64
}

type endpoint struct {
	EndpointConfig
	index      int
	max        int // static limit
	limit      int // current limit, in [1, max]
	inflight   int
	prefilling int // prompt tokens admitted here without a first token
	preempting int
	drained    bool
	load       EndpointLoad
	admitted   uint64
	// prefixBlocks and prefixMatched: the prompt blocks of requests bound
	// here, and how many of them the prefix index held here at the time.
	prefixBlocks, prefixMatched uint64
	excess                      int        // abort.go: what the last load report held beyond llmesh's in flight
	abort                       abortWatch // abort.go
	eject                       ejectState // eject.go
}

func newEndpoints(pc PoolConfig) []*endpoint {
	cfgs := pc.Endpoints
	if len(cfgs) == 0 {
		cfgs = []EndpointConfig{{MaxInflight: pc.MaxInflight}}
	}
	share := (pc.MaxInflight + len(cfgs) - 1) / len(cfgs)
	eps := make([]*endpoint, len(cfgs))
	for i, c := range cfgs {
		n := c.MaxInflight
		if n == 0 {
			n = max(1, share)
		}
		eps[i] = &endpoint{EndpointConfig: c, index: i, max: n, limit: n}
	}
	return eps
}

func (ep *endpoint) room() bool { return !ep.out() && ep.inflight < ep.limit }

// score is the picker's load score; lower is better.
func (ep *endpoint) score() float64 {
	kv := ep.load.KVUsage
	if kv != kv || kv < 0 {
		kv = 0
	}
	return float64(max(ep.inflight, ep.load.Running)+max(0, ep.load.Waiting))/float64(ep.limit) + min(kv, 1)
}

// pick chooses the endpoint for waiting request e (see the rules above),
// or nil when no endpoint has room.
func (m *Machine) pick(p *pool, e *entry) *endpoint {
	if e.req.pin() != "" {
		// A pinned request goes to its endpoint or waits.
		if ep := p.endpointNamed(e.req.pin()); ep != nil && ep.room() {
			return ep
		}
		return nil
	}
	if t := e.target; t != nil && t.room() {
		return t
	}
	if e.req.avoid() != "" {
		return m.pickAvoiding(p, e)
	}
	return m.pickAny(p, e, nil)
}

// pickAvoiding is pick for a request that avoids an endpoint: any other
// endpoint with room, else that one only when every other is out.
func (m *Machine) pickAvoiding(p *pool, e *entry) *endpoint {
	var avoided *endpoint
	others := false
	for _, ep := range p.endpoints {
		if ep.Name == e.req.avoid() {
			avoided = ep
		} else if !ep.out() {
			others = true
		}
	}
	if avoided == nil || avoided.out() {
		return m.pickAny(p, e, nil)
	}
	best := m.pickAny(p, e, avoided)
	if best == nil && !others && avoided.room() {
		return avoided
	}
	return best
}

// pickAny is pick without a preemption target, among p's endpoints but
// skip (nil: all).
func (m *Machine) pickAny(p *pool, e *entry, skip *endpoint) *endpoint {
	if e.req.affinity() != "" {
		return pickAffinity(p, e, skip)
	}
	sc := m.pickScoring(p, e)
	var best *endpoint
	bestS, bestAhead := math.Inf(1), 0
	for _, ep := range p.endpoints {
		if ep == skip || !ep.room() || sc.overCap(ep) {
			continue
		}
		s, ahead := sc.score(ep)
		better := best == nil || s < bestS || (s == bestS && ep.inflight < best.inflight)
		if sc.multi && sc.urgent && best != nil && ahead != bestAhead {
			better = ahead < bestAhead
		}
		if better {
			best, bestS, bestAhead = ep, s, ahead
		}
	}
	return best
}

// pickAffinity is the endpoint with room, but skip, that ranks highest for
// e's affinity key (rendezvous hashing).
func pickAffinity(p *pool, e *entry, skip *endpoint) *endpoint {
	var best *endpoint
	var bestH uint64
	for _, ep := range p.endpoints {
		if h := affinityHash(e.req.affinity(), ep.Name); ep != skip && ep.room() && (best == nil || h > bestH) {
			best, bestH = ep, h
		}
	}
	return best
}

// pickScore is what pickAny scores endpoints by for one request: load,
// prefix matches, and for the most urgent priority on several endpoints
// the prompt tokens its prefill would share steps with.
type pickScore struct {
	p      *pool
	e      *entry
	multi  bool  // more than one endpoint
	urgent bool  // e is of the most urgent priority
	capEp  int   // per-endpoint share of max_prefill_tokens for less urgent requests (0: none)
	match  []int // per endpoint, e's leading blocks its prefix cache likely holds (nil: no prefix routing)
	blocks int
}

func (m *Machine) pickScoring(p *pool, e *entry) pickScore {
	sc := pickScore{p: p, e: e, multi: len(p.endpoints) > 1, urgent: e.Priority == m.top}
	if sc.multi && !sc.urgent {
		sc.capEp = m.prefillCap(p) / len(p.endpoints)
	}
	if p.prefix != nil {
		if sc.blocks = len(blocksOf(e)); sc.blocks > 0 {
			sc.match = p.matchPrefix(e)
		}
	}
	return sc
}

// overCap reports whether e's prompt would take ep's prefilling past its
// share of max_prefill_tokens.
func (sc *pickScore) overCap(ep *endpoint) bool {
	return sc.capEp > 0 && ep.prefilling > 0 && ep.prefilling+sc.e.req.PromptTokens > sc.capEp
}

// score is ep's load score (lower is better), less its prefix match, and
// ahead, the prompt tokens the urgent request's prefill shares steps with
// there, less what its prefix cache likely saves it.
func (sc *pickScore) score(ep *endpoint) (s float64, ahead int) {
	s, ahead = ep.score(), ep.prefilling
	if sc.match != nil {
		s -= sc.p.PrefixRouting.Weight * float64(sc.match[ep.index]) / float64(sc.blocks)
		ahead -= sc.e.req.PromptTokens * sc.match[ep.index] / sc.blocks
	}
	return s, ahead
}

// blocksOf is the part of e's prompt blocks the picker looks at.
func blocksOf(e *entry) []kvblock.Hash {
	b := e.req.blocks()
	if len(b) > MaxBlocks {
		b = b[:MaxBlocks]
	}
	return b
}

// matchPrefix is, per endpoint of p, how many of waiting request e's
// leading blocks p's prefix index holds; the result is kept until another
// request is matched, so that pick and recordPrefix share it.
func (p *pool) matchPrefix(e *entry) []int {
	if p.matchFor != e.ticket || p.match == nil {
		p.match = p.prefix.Match(p.match, blocksOf(e))
		p.matchFor = e.ticket
	}
	return p.match
}

// recordPrefix books e's admission to its endpoint in p's prefix index
// (and the endpoint's prefix counts), then lets go of its blocks: a
// requeue carries them again.
func (p *pool) recordPrefix(e *entry) {
	blocks := blocksOf(e)
	if len(blocks) == 0 {
		return
	}
	ep := e.ep
	ep.prefixBlocks += uint64(len(blocks))
	ep.prefixMatched += uint64(p.matchPrefix(e)[ep.index])
	p.prefix.Record(ep.index, blocks)
	p.matchFor = 0 // the index changed
	e.cachedPrompt = min(len(blocks)*kvblock.DefaultBlockSize, e.req.PromptTokens)
	e.req.dropBlocks()
}

func affinityHash(key, endpoint string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(key))
	h.Write([]byte{0})
	h.Write([]byte(endpoint))
	// FNV's high bits mix poorly for short inputs; finish with a
	// multiply-xorshift so that the ranking is not biased by name length.
	x := h.Sum64()
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	return x
}

// slotBalance is how many more requests could be admitted into p (free or
// being freed by preemption), counting only endpoints that are not drained:
// the pool's own free slots, bounded by the endpoints' free slots.
func (p *pool) slotBalance() int {
	free := 0
	for _, ep := range p.endpoints {
		if !ep.out() {
			free += max(0, ep.limit-ep.inflight+ep.preempting)
		}
	}
	return min(p.limit-p.inflight+p.preempting, free)
}

// endpointVictims restricts the candidate victims for waiting request e to
// the endpoint e will use, and records that endpoint as e's target. With
// one endpoint, or when an endpoint that is not drained has room (only the
// pool's own bound is short, so any victim makes room and e goes where
// there is room), the candidates stay as they are.
func (m *Machine) endpointVictims(p *pool, e *entry, victims []Candidate) []Candidate {
	if e.req.pin() != "" {
		return pinnedVictims(p, e, victims)
	}
	if len(p.endpoints) == 1 {
		e.target = p.endpoints[0]
		return victims
	}
	for _, ep := range p.endpoints {
		if !ep.out() && ep.inflight-ep.preempting < ep.limit {
			e.target = nil
			return victims
		}
	}
	// Each endpoint's best victim in the Preemptor's Order; the endpoint
	// with the best one wins (one victim is what a single request needs on
	// a full endpoint).
	cheapest := make([]*Candidate, len(p.endpoints))
	for i := range victims {
		// One victim must make room: an endpoint over its (lowered) limit
		// needs more than one and is left out.
		v := &victims[i]
		ep := v.e.ep
		if ep.out() || ep.inflight-ep.preempting != ep.limit {
			continue
		}
		if cheapest[ep.index] == nil || p.pre.Order(v, cheapest[ep.index]) < 0 {
			cheapest[ep.index] = v
		}
	}
	var target *endpoint
	for i, v := range cheapest {
		if v != nil && (target == nil || p.pre.Order(v, cheapest[target.index]) < 0) {
			target = p.endpoints[i]
		}
	}
	e.target = target
	if target == nil {
		return victims[:0]
	}
	return onEndpoint(victims, target)
}

// onEndpoint keeps the victims running on ep, in place.
func onEndpoint(victims []Candidate, ep *endpoint) []Candidate {
	out := victims[:0]
	for _, v := range victims {
		if v.e.ep == ep {
			out = append(out, v)
		}
	}
	return out
}

// pinnedVictims is endpointVictims for a pinned request: with room on its
// endpoint (only the pool's bound is short) any victim makes room; with
// the endpoint full, victims there only; drained, ejected or over its
// (lowered) limit, none.
func pinnedVictims(p *pool, e *entry, victims []Candidate) []Candidate {
	ep := p.endpointNamed(e.req.pin())
	e.target = nil
	switch {
	case ep == nil || ep.out() || ep.inflight-ep.preempting > ep.limit:
		return victims[:0]
	case ep.inflight-ep.preempting < ep.limit:
		return victims
	}
	e.target = ep
	return onEndpoint(victims, ep)
}

// endpointNamed is p's endpoint of that name, or nil.
func (p *pool) endpointNamed(name string) *endpoint {
	for _, ep := range p.endpoints {
		if ep.Name == name {
			return ep
		}
	}
	return nil
}

func (m *Machine) endpoint(poolName, name string) (*pool, *endpoint, error) {
	p := m.poolByName[poolName]
	if p == nil {
		return nil, nil, fmt.Errorf("scheduler: unknown pool %q", poolName)
	}
	for _, ep := range p.endpoints {
		if ep.Name == name {
			return p, ep, nil
		}
	}
	return nil, nil, fmt.Errorf("scheduler: pool %q has no endpoint %q", poolName, name)
}

// SetEndpointLimit changes one endpoint's admission limit (capacity learned
// from that engine); it is clamped to [1, its static MaxInflight]. As with
// SetLimit, lowering it preempts nothing.
func (m *Machine) SetEndpointLimit(poolName, name string, n int) error {
	_, ep, err := m.endpoint(poolName, name)
	if err != nil {
		return err
	}
	ep.limit = max(1, min(n, ep.max))
	return nil
}

// SetEndpointHealth drains an endpoint (healthy false: nothing new is
// admitted there; what runs there goes on) or brings it back.
func (m *Machine) SetEndpointHealth(poolName, name string, healthy bool) error {
	_, ep, err := m.endpoint(poolName, name)
	if err != nil {
		return err
	}
	ep.drained = !healthy
	return nil
}

// SetEndpointLoad records an endpoint's own report of its load, which the
// picker's score uses.
func (m *Machine) SetEndpointLoad(poolName, name string, l EndpointLoad) error {
	_, ep, err := m.endpoint(poolName, name)
	if err != nil {
		return err
	}
	ep.load = l
	return nil
}

// EndpointOf returns the endpoint a running ticket is bound to, and false
// for a ticket that is not running.
func (m *Machine) EndpointOf(t Ticket) (string, bool) {
	e := m.entries.get(t)
	if e == nil || e.state != running {
		return "", false
	}
	return e.ep.Name, true
}

// EndpointStats is a snapshot of one endpoint.
type EndpointStats struct {
	Name        string
	Limit       int
	MaxInflight int
	InFlight    int
	Preempting  int
	Drained     bool
	// Ejected: left out after failing outcomes until EjectedUntil
	// (eject.go); Ejections counts ejections so far.
	Ejected      bool
	EjectedUntil time.Time
	Ejections    uint64
	Load         EndpointLoad
	// Admitted counts admissions bound to this endpoint.
	Admitted uint64
	// PrefixBlocks counts the prompt blocks of admissions bound here
	// (pools with PrefixRouting, requests with Blocks); PrefixMatched how
	// many of them were leading blocks the prefix index held for this
	// endpoint when it was chosen: the hits the picker expected.
	PrefixBlocks, PrefixMatched uint64
}

func (p *pool) endpointStats() []EndpointStats {
	out := make([]EndpointStats, len(p.endpoints))
	for i, ep := range p.endpoints {
		out[i] = EndpointStats{Name: ep.Name, Limit: ep.limit, MaxInflight: ep.max, InFlight: ep.inflight,
			Preempting: ep.preempting, Drained: ep.drained, Load: ep.load, Admitted: ep.admitted,
			PrefixBlocks: ep.prefixBlocks, PrefixMatched: ep.prefixMatched,
			Ejected: !ep.eject.until.IsZero(), EjectedUntil: ep.eject.until, Ejections: ep.eject.ejected}
	}
	return out
}

// validateEndpoints checks a pool's endpoints; path is the pool's.
func validateEndpoints(path string, eps []EndpointConfig, bad func(string, ...any)) {
	seen := map[string]bool{}
	for j, ep := range eps {
		switch {
		case ep.Name == "" && len(eps) > 1:
			bad("%s.endpoints[%d].name: must not be empty in a pool of several endpoints", path, j)
		case seen[ep.Name]:
			bad("%s.endpoints[%d].name: duplicate endpoint %q", path, j, ep.Name)
		}
		seen[ep.Name] = true
		if ep.MaxInflight < 0 {
			bad("%s.endpoints[%d].max_inflight: %d must not be negative", path, j, ep.MaxInflight)
		}
	}
}
