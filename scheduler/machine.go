package scheduler

import (
	"fmt"
	"time"

	"github.com/llmesh/llmesh/kvblock"
	"github.com/llmesh/llmesh/prefixindex"
)

// Ticket names one request inside a Machine, from Arrive until it is
// finished, cancelled or rejected. Tickets are never reused.
type Ticket uint64

// Rejection is a waiting request the machine refused; Err wraps
// ErrRejected or ErrQueueFull and says why.
type Rejection struct {
	Ticket Ticket
	Err    error
}

// Decisions is what one Step decided. The caller acts on every element
// exactly once: admitted tickets start running, rejected ones are answered
// with their error and are gone, preempted ones are asked to stop (they keep
// their capacity until Finish).
type Decisions struct {
	Admitted  []Ticket
	Rejected  []Rejection
	Preempted []Ticket
	// Wake is the next time Step must be called even if no event happens
	// (batching window tick, max-wait expiry, preemption check); the zero
	// time means only events matter.
	Wake time.Time
}

type state uint8

const (
	waiting state = iota
	running
)

type entry struct {
	// What Progress reads, once per streamed token, comes first: two cache
	// lines rather than one field in each of five.
	ticket     Ticket
	state      state
	firstToken bool
	preempting bool
	removed    bool // left its queue (admitted, cancelled or rejected)
	tokens     int
	slot       int // in its pool's slotIndex (slotwait.go)
	pool       *pool
	class      *class
	firstAt    time.Time
	Entry
	req      reqFields
	cost     int
	admitted time.Time
	preempts int // preemptions before this admission (by Request.ID)
	runIdx   int
	ep       *endpoint // where it runs, once admitted
	target   *endpoint // where preemption made room for it; nil: none
	// cachedPrompt is the prompt tokens of its blocks booked in the prefix
	// index at its admission (pools with PrefixRouting): once computed,
	// its endpoint's prefix cache keeps them, so preempting it does not
	// throw them away (cost.go).
	cachedPrompt int
}

// reqFields is what an entry keeps of its Request: the fields read after
// arrival. Class, Arrival and Requeue are in Entry and Pool is the entry's
// pool; the routing hints, which most requests lack, sit behind a pointer
// that is nil when the request has none, so a waiting request (a fleet far
// past saturation holds a million) costs 40 bytes here instead of a whole
// Request's 168.
type reqFields struct {
	ID                      string
	PromptTokens, MaxTokens int
	hints                   *reqHints
}

// reqHints are a Request's Affinity, Blocks, Avoid and Pin.
type reqHints struct {
	affinity, avoid, pin string
	blocks               []kvblock.Hash
}

func keepOf(r Request) reqFields {
	k := reqFields{ID: r.ID, PromptTokens: r.PromptTokens, MaxTokens: r.MaxTokens}
	if r.Affinity != "" || r.Avoid != "" || r.Pin != "" || len(r.Blocks) > 0 {
		k.hints = &reqHints{affinity: r.Affinity, avoid: r.Avoid, pin: r.Pin, blocks: r.Blocks}
	}
	return k
}

// pin, avoid, affinity and blocks are the Request's; empty without hints.
func (r *reqFields) pin() string {
	if r.hints == nil {
		return ""
	}
	return r.hints.pin
}

func (r *reqFields) avoid() string {
	if r.hints == nil {
		return ""
	}
	return r.hints.avoid
}

func (r *reqFields) affinity() string {
	if r.hints == nil {
		return ""
	}
	return r.hints.affinity
}

func (r *reqFields) blocks() []kvblock.Hash {
	if r.hints == nil {
		return nil
	}
	return r.hints.blocks
}

// dropBlocks lets go of the prompt's block hashes.
func (r *reqFields) dropBlocks() {
	if r.hints != nil {
		r.hints.blocks = nil
	}
}

type class struct {
	ClassConfig
	index int
}

// queue is one class's waiting line in a pool: arrival order, requeued
// requests in front. Removed entries are skipped lazily.
type queue struct {
	items []*entry
	head  int
	live  int
}

func (q *queue) pushBack(e *entry) { q.items = append(q.items, e); q.live++ }

func (q *queue) pushFront(e *entry) {
	if q.head > 0 {
		q.head--
		q.items[q.head] = e
	} else {
		q.items = append([]*entry{e}, q.items...)
	}
	q.live++
}

// front returns the first live entry, dropping removed ones.
func (q *queue) front() *entry {
	for q.head < len(q.items) {
		if e := q.items[q.head]; !e.removed {
			return e
		}
		q.items[q.head] = nil
		q.head++
	}
	q.items, q.head = q.items[:0], 0
	return nil
}

func (q *queue) remove(e *entry) {
	e.removed = true
	q.live--
}

type pool struct {
	PoolConfig
	ejection   Ejection // PoolConfig.Ejection with its defaults (eject.go)
	index      int
	limit      int
	inflight   int
	tokens     int
	prefilling int // prompt tokens of running entries without a first token
	// prefillingLong is the part of prefilling in prompts longer than one
	// engine step's token budget (prefillHeld).
	prefillingLong int
	preempting     int
	queues         []queue  // by class index
	running        []*entry // in flight, unordered; entry.runIdx is the index
	nextBatch      time.Time
	prefill        ewma
	tpot           ewma
	obs            observed // cost.go, tune.go
	counts         Counters
	endpoints      []*endpoint
	// abort: the engine kept a preempted request (abort.go); no more
	// preemption but probes.
	abort   abortState
	victims victimQueue // preemptgate.go
	// pre is the Policy's preemption half; nil when it does not preempt.
	// victimTop is, per class, whether pre.Victim allows the class for
	// the most urgent class (fixed: Victim depends on the classes only);
	// victimOK is the victim search's scratch (preemptwalk.go).
	pre       Preemptor
	victimTop []bool
	victimOK  []bool
	// run indexes the running requests for the preemption walk
	// (slotwait.go); kept only when track, that is when the policy
	// preempts.
	run   slotIndex
	track bool
	// prefix remembers which prompt blocks went to which endpoint; nil
	// unless PrefixRouting is on (endpoint.go). match is its scratch
	// result, valid for the waiting request matchFor.
	prefix   prefixIndex
	exact    *prefixindex.Exact // prefix, when PrefixRouting.Precise
	match    []int
	matchFor Ticket
}

// Machine is the scheduler's pure state machine. It owns no goroutines and
// no timers and never reads a clock: every method takes the current time,
// and Step returns the decisions plus the next time it wants to be called.
// The same machine therefore runs in real time under a host's runtime
// (Scheduler) and in virtual time under a discrete-event simulator. It is
// not safe for concurrent use; its owner serializes calls.
type Machine struct {
	cfg        Config
	pools      []*pool
	poolByName map[string]*pool
	classes    []*class
	classByNm  map[string]*class
	defClass   *class
	top        int // the most urgent class priority (lowest value)
	entries    ticketTable
	next       Ticket
	seq        uint64
	preempted  map[string]preemptRecord // by pool + "\x00" + Request.ID
	lastPurge  time.Time
}

type preemptRecord struct {
	count int
	at    time.Time
}

// maxTokens bounds a request's token counts so that sums and predictions
// cannot overflow.
const maxTokens = 1 << 31

// preemptMemory is how long a preempted request's count is remembered while
// waiting for its requeue.
const preemptMemory = 10 * time.Minute

// NewMachine validates cfg and returns an empty machine.
func NewMachine(cfg Config) (*Machine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m := &Machine{
		cfg:        cfg,
		poolByName: map[string]*pool{},
		classByNm:  map[string]*class{},
		preempted:  map[string]preemptRecord{},
	}
	for i, c := range cfg.Classes {
		cl := &class{ClassConfig: c, index: i}
		m.classes = append(m.classes, cl)
		m.classByNm[c.Name] = cl
	}
	m.defClass = m.classes[0]
	m.top = m.classes[0].Priority
	for _, cl := range m.classes {
		m.top = min(m.top, cl.Priority)
	}
	if cfg.DefaultClass != "" {
		m.defClass = m.classByNm[cfg.DefaultClass]
	}
	for i, pc := range cfg.Pools {
		p := &pool{
			PoolConfig: pc,
			index:      i,
			limit:      pc.MaxInflight,
			queues:     make([]queue, len(m.classes)),
			endpoints:  newEndpoints(pc),
			ejection:   pc.Ejection.withDefaults(),
		}
		p.pre, p.track = pc.Policy.(Preemptor)
		if p.track {
			p.run = newSlotIndex(len(m.classes))
			p.victimTop, p.victimOK = make([]bool, len(m.classes)), make([]bool, len(m.classes))
			for ci, cl := range m.classes {
				p.victimTop[ci] = cl.Priority > m.top && p.pre.Victim(&cl.ClassConfig, m.top)
			}
		}
		if pc.PrefixRouting.enabled() && pc.PrefixRouting.Precise {
			p.exact, _ = prefixindex.NewExact(len(p.endpoints), pc.PrefixRouting.CapacityBlocks) // validated above
			p.prefix = p.exact
		} else if pc.PrefixRouting.enabled() {
			caps := make([]int, len(p.endpoints))
			for i := range caps {
				caps[i] = pc.PrefixRouting.CapacityBlocks
			}
			p.prefix, _ = prefixindex.New(caps) // capacity validated above
		}
		m.pools = append(m.pools, p)
		m.poolByName[pc.Name] = p
	}
	return m, nil
}

// Arrive enqueues req and returns its ticket; it admits nothing by itself
// (call Step). Errors wrap ErrRejected (unknown pool, can never fit) or
// ErrQueueFull; a rejected request has no ticket.
func (m *Machine) Arrive(now time.Time, req Request) (Ticket, error) {
	p, cl, err := m.accept(&req)
	if err != nil {
		return 0, err
	}
	cost := req.PromptTokens + req.MaxTokens
	q := &p.queues[cl.index]
	if req.Arrival.IsZero() || req.Arrival.After(now) {
		req.Arrival = now
	}
	m.next++
	m.seq++
	e := &entry{
		Entry: Entry{
			Class:             cl.Name,
			Priority:          cl.Priority,
			EffectivePriority: cl.Priority,
			Arrival:           req.Arrival,
			Requeued:          req.Requeue,
			Seq:               m.seq,
		},
		ticket: m.next,
		req:    keepOf(req),
		pool:   p,
		class:  cl,
		cost:   cost,
	}
	if cl.TTFT > 0 {
		e.Deadline = req.Arrival.Add(cl.TTFT)
	}
	if req.ID != "" && len(m.preempted) > 0 {
		if r, ok := m.preempted[p.Name+"\x00"+req.ID]; ok {
			e.preempts = r.count
		}
	}
	m.entries.put(e)
	if req.Requeue {
		q.pushFront(e)
		p.counts.Requeued++
	} else {
		q.pushBack(e)
		p.obs.arrival(now, cl.Priority == m.top, req.PromptTokens)
	}
	p.counts.Arrived++
	return e.ticket, nil
}

// accept finds req's pool and class and checks that req may wait there:
// a known pool and pinned endpoint, token counts in range and within the
// pool's token bound, room in its class's queue.
func (m *Machine) accept(req *Request) (*pool, *class, error) {
	p := m.pools[0]
	if req.Pool != "" {
		p = m.poolByName[req.Pool]
		if p == nil {
			return nil, nil, fmt.Errorf("%w: unknown pool %q", ErrRejected, req.Pool)
		}
	}
	if req.Pin != "" && p.endpointNamed(req.Pin) == nil {
		p.counts.Rejected++
		return nil, nil, fmt.Errorf("%w: pool %q has no endpoint %q (the request's pinned endpoint)", ErrRejected, p.Name, req.Pin)
	}
	cl := m.classByNm[req.Class]
	if cl == nil {
		cl = m.defClass
	}
	if req.PromptTokens < 0 || req.MaxTokens < 0 || req.PromptTokens > maxTokens || req.MaxTokens > maxTokens {
		return nil, nil, fmt.Errorf("%w: token counts (prompt %d, max %d) must be in [0, %d]", ErrRejected, req.PromptTokens, req.MaxTokens, maxTokens)
	}
	if cost := req.PromptTokens + req.MaxTokens; p.MaxInflightTokens > 0 && cost > p.MaxInflightTokens {
		p.counts.Rejected++
		return nil, nil, fmt.Errorf("%w: request needs %d tokens, pool %q holds at most %d (max_inflight_tokens)",
			ErrRejected, cost, p.Name, p.MaxInflightTokens)
	}
	if q := &p.queues[cl.index]; !req.Requeue && cl.MaxQueue > 0 && q.live >= cl.MaxQueue {
		p.counts.QueueFull++
		return nil, nil, fmt.Errorf("%w: class %q has %d waiting (queue.max_length %d)", ErrQueueFull, cl.Name, q.live, cl.MaxQueue)
	}
	return p, cl, nil
}

// Cancel takes a request away: a waiting one leaves its queue, a running one
// is finished as Cancelled. Unknown tickets are ignored, so callers may
// cancel from every exit path.
func (m *Machine) Cancel(now time.Time, t Ticket) {
	e := m.entries.get(t)
	if e == nil {
		return
	}
	if e.state == running {
		m.Finish(now, t, Cancelled)
		return
	}
	e.pool.queues[e.class.index].remove(e)
	e.pool.counts.Cancelled++
	m.entries.remove(t)
}

// Progress records stream progress of a running request; it feeds victim
// order and the prefill and decode-speed estimates. Unknown or waiting
// tickets are ignored.
func (m *Machine) Progress(now time.Time, t Ticket, pr Progress) {
	m.progress(now, t, pr)
}

// progress is Progress; it reports whether the request's first token freed
// prefill budget, which may let waiting requests in (the runtime steps then).
func (m *Machine) progress(now time.Time, t Ticket, pr Progress) bool {
	e := m.entries.get(t)
	if e == nil || e.state != running {
		return false
	}
	freed := false
	wasFirst, was := e.firstToken, e.tokens
	if (pr.FirstToken || pr.Tokens > 0) && !e.firstToken {
		e.firstToken = true
		e.firstAt = now
		e.pool.prefill.observe(now.Sub(e.admitted))
		e.pool.obs.firstToken(now, e.req.PromptTokens, now.Sub(e.admitted))
		e.pool.addPrefill(e, -1)
		freed = m.prefillCap(e.pool) > 0 && e.req.PromptTokens > 0
	}
	if pr.Tokens > e.tokens {
		e.tokens = pr.Tokens
		if e.tokens > 1 && now.After(e.firstAt) {
			e.pool.tpot.observe(now.Sub(e.firstAt) / time.Duration(e.tokens-1))
		}
	}
	if e.pool.track && (e.firstToken != wasFirst || e.tokens != was) {
		e.pool.run.progressed(e, wasFirst)
	}
	return freed
}

// TokensMatter reports whether progress beyond a request's first token
// can change a decision in the named pool: only a preemptive policy reads
// it (victim order, a running request's predicted remaining time and the
// decode-speed estimate behind it). A host may leave such reports out
// where it is false; the first token must always be reported, since it
// ends the request's prefill. It is the pool's track: the running index
// that progress updates exists only then. Stats' TPOTEstimate is fed only
// by the reports given. Unknown pools report true.
func (m *Machine) TokensMatter(poolName string) bool {
	p := m.poolByName[poolName]
	return p == nil || p.track
}

// Warm loads the entry of ticket t, which a Progress is about to look
// up, and changes nothing; what it returns means nothing but keeps the
// load from being dropped. A host with a batch of reports at one instant
// (the simulator's fleet, one engine step's tokens) warms every ticket
// first, so that the cache misses of independent lookups overlap rather
// than come one after the other.
func (m *Machine) Warm(t Ticket) int {
	if e := m.entries.get(t); e != nil {
		return e.tokens
	}
	return 0
}

// FirstToken is Progress with FirstToken set.
func (m *Machine) FirstToken(now time.Time, t Ticket) {
	m.Progress(now, t, Progress{FirstToken: true})
}

// Finish ends a running request with outcome o and frees its capacity; a
// waiting ticket is cancelled. Unknown tickets are ignored, so every
// admission is released at most once however often Finish is called.
func (m *Machine) Finish(now time.Time, t Ticket, o Outcome) {
	e := m.entries.get(t)
	if e == nil {
		return
	}
	if e.state == waiting {
		m.Cancel(now, t)
		return
	}
	p := e.pool
	m.entries.remove(t)
	if p.track && !e.preempting {
		p.run.left(p, e)
	}
	last := p.running[len(p.running)-1]
	p.running[e.runIdx], last.runIdx = last, e.runIdx
	p.running[len(p.running)-1] = nil
	p.running = p.running[:len(p.running)-1]
	p.inflight--
	e.ep.inflight--
	p.tokens -= e.cost
	if !e.firstToken {
		p.addPrefill(e, -1)
	}
	if e.preempting {
		p.preempting--
		e.ep.preempting--
	}
	switch o {
	case Done:
		p.counts.Done++
		p.obs.finished(now)
	case Failed, Unreachable:
		p.counts.Failed++
	case Cancelled:
		p.counts.Cancelled++
	case Preempted:
		p.counts.PreemptedDone++
		e.ep.preemptReleased(now)
	}
	m.endpointOutcome(now, p, e, o)
	if e.req.ID != "" && o != Preempted && len(m.preempted) > 0 {
		delete(m.preempted, p.Name+"\x00"+e.req.ID)
	}
}

// SetLimit changes a pool's admission limit (capacity learned from the
// engine); it is clamped to [1, MaxInflight]. Lowering it below what is in
// flight preempts nothing: admissions stop until enough requests finish.
func (m *Machine) SetLimit(poolName string, n int) error {
	p := m.poolByName[poolName]
	if p == nil {
		return fmt.Errorf("scheduler: unknown pool %q", poolName)
	}
	p.limit = max(1, min(n, p.MaxInflight))
	return nil
}

// Step makes every decision due at now: max-wait rejections, admissions
// (at batching-window ticks when a window is set) and preemptions.
func (m *Machine) Step(now time.Time) Decisions { return m.step(now, true) }

// step is Step; gate false always walks for preemption (the equivalence
// test of preemptgate.go compares the two).
func (m *Machine) step(now time.Time, gate bool) Decisions {
	var d Decisions
	for _, p := range m.pools {
		m.expire(now, p, &d)
		m.readmitEjected(now, p, &d)
		m.observeOverload(now, p)
		m.admit(now, p, &d)
		m.expiryWake(p, &d)
		if p.pre != nil && (!gate || m.preemptCanAct(now, p, &d)) {
			m.preempt(now, p, &d)
		}
	}
	if now.Sub(m.lastPurge) > time.Minute && len(m.preempted) > 0 {
		m.lastPurge = now
		for k, r := range m.preempted {
			if now.Sub(r.at) > preemptMemory {
				delete(m.preempted, k)
			}
		}
	}
	return d
}

func (d *Decisions) wakeAt(t time.Time) {
	if d.Wake.IsZero() || t.Before(d.Wake) {
		d.Wake = t
	}
}

// expire rejects requests whose class max wait has passed. Queues are in
// arrival order (requeued requests arrived earlier still), so it looks at
// the front only.
func (m *Machine) expire(now time.Time, p *pool, d *Decisions) {
	for ci := range p.queues {
		cl := m.classes[ci]
		if cl.MaxWait <= 0 {
			continue
		}
		q := &p.queues[ci]
		for e := q.front(); e != nil; e = q.front() {
			if e.Arrival.Add(cl.MaxWait).After(now) {
				break
			}
			q.remove(e)
			m.entries.remove(e.ticket)
			p.counts.Rejected++
			d.Rejected = append(d.Rejected, Rejection{e.ticket,
				fmt.Errorf("%w: waited %v, over class %q queue.max_wait %v", ErrRejected, now.Sub(e.Arrival), cl.Name, cl.MaxWait)})
		}
	}
}

// expiryWake asks for a wake-up when the oldest waiting request of a class
// with a max wait would expire.
func (m *Machine) expiryWake(p *pool, d *Decisions) {
	for ci := range p.queues {
		if cl := m.classes[ci]; cl.MaxWait > 0 {
			if e := p.queues[ci].front(); e != nil {
				d.wakeAt(e.Arrival.Add(cl.MaxWait))
			}
		}
	}
}

// best returns the waiting request the policy admits next, refreshing the
// effective priorities of the queue heads.
func (m *Machine) best(now time.Time, p *pool) *entry {
	var b *entry
	for ci := range p.queues {
		e := p.queues[ci].front()
		if e == nil {
			continue
		}
		m.age(now, p, e)
		if b == nil || p.Policy.Less(&e.Entry, &b.Entry) {
			b = e
		}
	}
	return b
}

func (m *Machine) age(now time.Time, p *pool, e *entry) {
	e.EffectivePriority = e.Priority
	if p.Aging > 0 {
		e.EffectivePriority -= int(now.Sub(e.Arrival) / p.Aging)
	}
}

func (m *Machine) fits(p *pool, e *entry) bool {
	if p.inflight >= p.limit {
		return false
	}
	if e.Priority != m.top && p.inflight >= p.limit-m.reserveFor(p) {
		return false
	}
	if p.MaxInflightTokens > 0 && p.tokens+e.cost > p.MaxInflightTokens {
		return false
	}
	return !m.prefillHeld(p, e)
}

// prefillHeld reports whether the prefill bound keeps e waiting: e is not of
// the most urgent priority, something is in prefill, and e's prompt would
// take the outstanding prefill past MaxPrefillTokens.
//
// A pool of several endpoints also bounds each endpoint (pick), and there
// long prompts — longer than one engine step's token budget — answer only
// to that: such a prompt goes alone to an engine that prefills nothing
// else, and it counts for nothing in the pool's sum. The pool's sum keeps
// some engines free of less urgent prefill for urgent arrivals, which is
// cheap while prompts take a step or less; a prompt of many steps held
// back for it leaves an engine idle for seconds, and with a stream of them
// (prompts of 10K tokens and more) the engines run 80–90% busy and the less
// urgent backlog never drains.
func (m *Machine) prefillHeld(p *pool, e *entry) bool {
	n := m.prefillCap(p) // tune.go: static or derived
	if n <= 0 || e.Priority == m.top {
		return false
	}
	if len(p.endpoints) > 1 {
		if longPrompt(e) {
			return false
		}
		short := p.prefilling - p.prefillingLong
		return short > 0 && short+e.req.PromptTokens > n
	}
	return p.prefilling > 0 && p.prefilling+e.req.PromptTokens > n
}

// longPrompt reports whether e's prompt takes more than one engine step
// (at vLLM's default max_num_batched_tokens) to prefill.
func longPrompt(e *entry) bool { return e.req.PromptTokens > maxPrefillCap }

// addPrefill adds (sign 1) or removes (sign -1) e's prompt from the
// outstanding prefill of p and of e's endpoint.
func (p *pool) addPrefill(e *entry, sign int) {
	n := sign * e.req.PromptTokens
	p.prefilling += n
	e.ep.prefilling += n
	if longPrompt(e) {
		p.prefillingLong += n
	}
}

// admit releases waiting requests in policy order while they fit. The head
// that does not fit blocks the rest (no skipping), so a large or urgent
// request is never starved by smaller ones behind it.
func (m *Machine) admit(now time.Time, p *pool, d *Decisions) {
	if p.BatchWindow > 0 && now.Before(p.nextBatch) {
		if p.waiting() > 0 {
			d.wakeAt(p.nextBatch)
		}
		return
	}
	released := false
	for {
		e := m.best(now, p)
		if e == nil || !m.fits(p, e) {
			break
		}
		ep := m.pick(p, e)
		if ep == nil {
			break
		}
		e.ep = ep
		ep.inflight++
		ep.admitted++
		if p.prefix != nil {
			p.recordPrefix(e)
		}
		p.queues[e.class.index].remove(e)
		e.state = running
		e.admitted = now
		e.runIdx = len(p.running)
		p.running = append(p.running, e)
		p.victims.admitted(m, p, e)
		if p.track {
			p.run.admitted(p, e)
		}
		p.inflight++
		p.tokens += e.cost
		p.addPrefill(e, 1)
		p.counts.Admitted++
		d.Admitted = append(d.Admitted, e.ticket)
		released = true
	}
	if p.BatchWindow > 0 && (released || p.waiting() > 0) {
		p.nextBatch = now.Add(p.BatchWindow)
		if p.waiting() > 0 {
			d.wakeAt(p.nextBatch)
		}
	}
}

func (p *pool) waiting() int {
	n := 0
	for i := range p.queues {
		n += p.queues[i].live
	}
	return n
}
