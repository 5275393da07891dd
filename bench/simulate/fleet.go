package simulate

import (
	"container/heap"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/llmesh/llmesh/bench/result"
	"github.com/llmesh/llmesh/bench/workload"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/capacity"
	"github.com/llmesh/llmesh/sim"
)

// A fleet is Options.Engines engine replicas behind Options.Proxies hosts
// in virtual time, the hosts sharing one scheduler machine or each with its
// own share of it (Options.Schedulers, layout.go). Two routings:
//
//   - RoutingEndpointAware: the pool has one endpoint per engine, each
//     with its own limit (learned from that engine's load) and load
//     report; an admission is bound to an endpoint and the proxy sends the
//     request there, so a preemption frees its slot on the engine the
//     urgent request will use (scheduler/endpoint.go).
//   - RoutingPool: what a host did before endpoints: one limit for the pool
//     (Engines times an engine's, learned from the engines' load summed
//     as if one metrics URL covered them), and the proxy picks the engine
//     itself, least-request over the requests it has outstanding there
//     (ties in round-robin order), unaware of the admission: the victim of
//     a preemption may run on another engine than the one the urgent
//     request is then sent to.
//   - RoutingPrefixAware: endpoint-aware, and the picker's prefix rule
//     (scheduler.PrefixRouting, Options.PrefixWeight) is on: each
//     request carries its prompt's block hashes (sim.SeqSpec.Blocks), and
//     the picker remembers, per endpoint, the blocks it sent there, up to
//     one engine's KV cache in blocks.
//
// Every message between a proxy and the scheduler or an engine takes
// Options.Hop: the arrival reaches the scheduler a hop after the proxy
// got it; an admission reaches the proxy a hop later and the engine a hop
// after that; a preemption reaches the proxy, which cancels upstream (the
// abort lands a hop later; tokens the engine makes meanwhile are thrown
// away) and releases the lease and queues the request again (both reach
// the scheduler a hop later); tokens reach the proxy, and so the client's
// record, a hop after their step, and the scheduler a hop after that, as
// does the finish. What stays instantaneous: the engines' load samples
// (the metrics tick reads them at its own time) and the proxy's own
// outstanding counts for least-request (they drop when the engine ends a
// request, a hop before the proxy would know; this favours pool routing).

// The single host in front of one engine (Options.fleet false) runs on
// the same event loop as a fleet of one (newLoop, fleet.direct): no hop,
// every message acted on as it is sent, the machine stepped at every
// event.

// maxEngines bounds Engines and Proxies so that a typo cannot allocate a
// fleet that never finishes.
const maxEngines = 4096

// Routing modes of a fleet (Options.Routing).
const (
	RoutingEndpointAware = "endpoint-aware"
	RoutingPool          = "pool"
	RoutingPrefixAware   = "prefix-aware"
)

// Routings lists the valid Options.Routing values.
func Routings() []string {
	return []string{RoutingEndpointAware, RoutingPool, RoutingPrefixAware, RoutingPrefixPrecise}
}

// msgKind is what a message between proxy, scheduler and engine carries.
type msgKind uint8

const (
	mArrive   msgKind = iota // proxy → scheduler: a new or requeued request
	mAdmitted                // scheduler → proxy: admitted (n: endpoint index, -1 for the pool)
	mPreempt                 // scheduler → proxy: stop it
	mAdd                     // proxy → engine: start an attempt
	mAbort                   // proxy → engine: cancel an attempt
	mProgress                // proxy → scheduler: n tokens so far
	mFinish                  // proxy → scheduler: the lease ends with out
	mCancel                  // proxy → scheduler: the client gave up (timeout.go)
)

type msg struct {
	at      int64 // ns since epoch
	kind    msgKind
	requeue bool
	out     scheduler.Outcome
	n       int
	tk      scheduler.Ticket
	v       *vreq
	a       *attempt
}

// msgQueue is a FIFO of messages that all take the same delay, so they
// are pushed in the order they are due.
type msgQueue struct {
	buf  []msg
	head int
}

func (q *msgQueue) push(m msg) { q.buf = append(q.buf, m) }

func (q *msgQueue) peek() (int64, bool) {
	if q.head == len(q.buf) {
		return 0, false
	}
	return q.buf[q.head].at, true
}

func (q *msgQueue) pop() msg {
	m := q.buf[q.head]
	q.buf[q.head] = msg{}
	q.head++
	if q.head == len(q.buf) {
		q.buf, q.head = q.buf[:0], 0
	} else if q.head >= 4096 && q.head*2 >= len(q.buf) {
		n := copy(q.buf, q.buf[q.head:])
		q.buf, q.head = q.buf[:n], 0
	}
	return m
}

// attempt is one admission of a request running on one engine.
type attempt struct {
	v        *vreq
	eng      *fleetEngine
	id       uint64 // engine sequence
	computed int    // tokens it holds in the engine's KV cache
	// progressed: its first token was reported.
	progressed bool
	// detached: the proxy cancelled it; the engine runs it until the
	// abort lands and its tokens are thrown away.
	detached bool
	// abandoned: cancelled because its client gave up, not to run again:
	// what it computed is not recomputed.
	abandoned bool
}

// fleetEngine is one engine replica and its step in flight.
type fleetEngine struct {
	eng       *sim.Engine
	name      string
	index     int
	heapIndex int // in fleet.steps; -1 when not stepping
	stepping  bool
	dirty     bool
	stepStart time.Time
	stepEnd   time.Time
	events    []sim.Event
	limit     int // endpoint-aware: its limit from its load
	util      EndpointUtil
}

// inFlight is what e's step in flight computes for sequence id: thrown
// away when id is aborted before the step ends.
func (e *fleetEngine) inFlight(id uint64) int {
	n := 0
	if e.stepping {
		for _, ev := range e.events {
			if ev.ID == id {
				n += int(ev.Scheduled)
			}
		}
	}
	return n
}

// engineHeap orders the stepping engines by the end of their step (then
// index), so the loop visits only engines that have something to do.
type engineHeap []*fleetEngine

func (h engineHeap) Len() int { return len(h) }
func (h engineHeap) Less(i, j int) bool {
	if !h[i].stepEnd.Equal(h[j].stepEnd) {
		return h[i].stepEnd.Before(h[j].stepEnd)
	}
	return h[i].index < h[j].index
}
func (h engineHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIndex, h[j].heapIndex = i, j
}
func (h *engineHeap) Push(x any) {
	e := x.(*fleetEngine)
	e.heapIndex = len(*h)
	*h = append(*h, e)
}
func (h *engineHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	e.heapIndex = -1
	*h = old[:len(old)-1]
	return e
}

// fleet is one discrete-event run of scheduler machines (one shared, or
// one per proxy) in front of many engines. Events: the next arrival at a
// proxy, the earliest end of an engine step, the next message due, the
// machines' wake-ups and the metrics tick.
type fleet struct {
	// ss are the scheduler machines: one shared by every proxy, or one
	// per proxy (layout.go).
	ss        []*fleetSched
	classes   []workload.Class
	prio      []int
	routing   string
	hop       int64
	engines   []*fleetEngine
	epIndex   map[string]int
	steps     engineHeap
	dirty     []*fleetEngine
	ended     []*fleetEngine
	q         msgQueue   // every message takes one hop
	q2        msgQueue   // engine → proxy → scheduler: two hops
	byEng     []*attempt // by engine sequence: the attempts an engine holds
	nextEng   uint64
	interval  time.Duration
	rule      capacity.Rule // pool routing: the pool's; endpoint-aware: each endpoint's
	limit     int           // pool routing: the pool's current limit (the sum of the machines')
	proxies   int
	out       [][]int32 // pool routing: per proxy, its requests outstanding per engine
	rr        []int
	c         counters
	now       time.Time
	finished  int
	recordAll bool
	late      bool
	reqs      []vreq
	// stepAll steps the machines at every event, as the single host
	// does; by default each steps as the hosts' runtime does
	// (scheduler/runtime.go): on an arrival, a release, a first token, a
	// limit change and its own wake-up. Progress beyond the first token
	// changes no decision.
	stepAll bool
	// direct: the single host in front of one engine (newLoop): no hop,
	// every message acted on as it is sent, a preemption tried on the
	// engine before the lease is released, refusals split as the
	// real-time harness splits them (refusal).
	direct  bool
	touched int // stepEnded's loads land here, so that they are not dropped
	// tokensMatter: the machines read progress beyond an attempt's first
	// token (scheduler.Machine.TokensMatter); the proxies report it only
	// then.
	tokensMatter bool
	clients      clientTimeouts
	// prefix: requests carry their prompt blocks to the scheduler
	// (RoutingPrefixAware).
	prefix bool
	// routed models a prefix cache per engine fed where requests went
	// (routed.go); nil when no prompt has an identity.
	routed *routedCaches
}

// fleetSched is one scheduler machine of a fleet and what the fleet knows
// of it.
type fleetSched struct {
	m        *scheduler.Machine
	index    int // in fleet.ss
	byTicket ticketIndex
	wake     time.Time
	needStep bool
}

// fleetConfig is the scheduler of a fleet: the single host's config with
// every pool bound multiplied by the number of engines and, for
// endpoint-aware and prefix-aware routing, one endpoint per engine with one
// engine's limit; prefix-aware routing remembers kvBlocks blocks per
// endpoint.
func fleetConfig(w *workload.Workload, pol scheduler.Policy, o Options, kvBlocks int) scheduler.Config {
	n := o.Engines
	po := o
	po.MaxInflight *= n
	po.MaxInflightTokens *= n
	po.MaxPrefillTokens *= n
	po.ReserveUrgent *= n
	cfg := schedulerConfig(w, pol, po)
	if o.Routing != RoutingPool {
		for i := range n {
			cfg.Pools[0].Endpoints = append(cfg.Pools[0].Endpoints, scheduler.EndpointConfig{Name: engineName(i), MaxInflight: o.MaxInflight})
		}
	}
	if o.Routing == RoutingPrefixAware || o.Routing == RoutingPrefixPrecise {
		cfg.Pools[0].PrefixRouting = scheduler.PrefixRouting{Weight: o.PrefixWeight, CapacityBlocks: kvBlocks, Precise: o.Routing == RoutingPrefixPrecise}
	}
	return cfg
}

func engineName(i int) string { return "e" + strconv.Itoa(i) }

func newFleet(w *workload.Workload, pol scheduler.Policy, o Options) (*fleet, error) {
	return newHosts(w, pol, o, false)
}

// newLoop is the single host in front of one engine: a fleet of one
// whose host acts on every message at once (fleet.direct) and steps its
// machine at every event. Options that describe a fleet are ignored.
func newLoop(w *workload.Workload, pol scheduler.Policy, o Options) (*fleet, error) {
	o.Engines, o.Proxies, o.Hop, o.Routing, o.Schedulers = 1, 1, 0, RoutingPool, SchedulersShared
	return newHosts(w, pol, o, true)
}

// newHosts builds the machines and the engines of one run; direct: the
// single host (newLoop).
func newHosts(w *workload.Workload, pol scheduler.Policy, o Options, direct bool) (*fleet, error) {
	prof, err := sim.LookupProfile(o.Profile)
	if err != nil {
		return nil, err
	}
	f := &fleet{
		classes: w.Classes, routing: o.Routing, hop: int64(o.Hop), proxies: o.Proxies,
		epIndex: map[string]int{}, byEng: []*attempt{nil},
		interval: o.MetricsInterval, late: o.LateHandoff, recordAll: true,
		prefix: o.Routing == RoutingPrefixAware || o.Routing == RoutingPrefixPrecise,
		direct: direct, stepAll: direct,
	}
	for i := range o.Engines {
		eng, err := sim.NewEngine(prof, o.Engine)
		if err != nil {
			return nil, fmt.Errorf("engine: %w", err)
		}
		e := &fleetEngine{eng: eng, name: engineName(i), index: i, heapIndex: -1, limit: o.MaxInflight}
		e.util.Name = e.name
		f.engines = append(f.engines, e)
		f.epIndex[e.name] = i
	}
	if o.Routing == RoutingPool {
		f.rule = capacity.Rule{Max: o.MaxInflight * o.Engines}
		f.limit = o.MaxInflight * o.Engines
		f.out = make([][]int32, o.Proxies)
		for i := range f.out {
			f.out[i] = make([]int32, o.Engines)
		}
		f.rr = make([]int, o.Proxies)
	} else {
		f.rule = capacity.Rule{Max: o.MaxInflight}
	}
	f.c.limitMin = o.MaxInflight * o.Engines
	for _, c := range w.Classes {
		f.prio = append(f.prio, c.Priority)
	}
	kvBlocks := f.engines[0].eng.Config().KVCacheTokens / sim.BlockSize
	cfgs := []scheduler.Config{fleetConfig(w, pol, o, kvBlocks)}
	if o.Schedulers == SchedulersPerProxy {
		cfgs = perProxyConfigs(cfgs[0], o)
	}
	if direct && o.Predictor == PredictTiming {
		cfgs[0].PrefillPredictor = f.predictPrefill
	}
	for i, cfg := range cfgs {
		m, err := scheduler.NewMachine(cfg)
		if err != nil {
			return nil, fmt.Errorf("scheduler: %w", err)
		}
		f.ss = append(f.ss, &fleetSched{m: m, index: i})
		f.tokensMatter = f.tokensMatter || m.TokensMatter(poolName)
	}
	if o.Routing == RoutingPrefixPrecise {
		if err := f.feedExact(); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// sched is the machine that schedules v: its proxy's, or the shared one.
func (f *fleet) sched(v *vreq) *fleetSched {
	if len(f.ss) == 1 {
		return f.ss[0]
	}
	return f.ss[v.proxy]
}

// send queues a message due one hop after now; the single host acts on
// it at once.
func (f *fleet) send(m msg) {
	if f.direct {
		f.deliver(m)
		return
	}
	m.at = ns(f.now) + f.hop
	f.q.push(m)
}

// sendBack queues a message from an engine's step to the scheduler: one
// hop to the proxy, one to the scheduler.
func (f *fleet) sendBack(m msg) {
	if f.hop == 0 {
		// Due now: the same as queueing it, as nothing is decided before
		// the step ends are all applied; most messages are these.
		f.deliver(m)
		return
	}
	m.at = ns(f.now) + 2*f.hop
	f.q2.push(m)
}

// end finishes a request for the client at t.
func (f *fleet) end(v *vreq, st result.Status, errMsg string, t time.Time) {
	v.done = true
	v.running(f.classes[v.it.Class].Name)
	v.rec.Status, v.rec.Error = st, errMsg
	v.rec.DoneNS = ns(t)
	v.rec.OutputTokens = v.sent
	f.finished++
	if t.After(f.c.end) {
		f.c.end = t
	}
}

func (f *fleet) at(n int64) time.Time { return epoch.Add(time.Duration(n)) }

// deliver acts on a message that is due now.
func (f *fleet) deliver(m msg) {
	switch m.kind {
	case mArrive:
		v := m.v
		s := f.sched(v)
		req := scheduler.Request{
			ID: v.id(), Pool: poolName, Class: f.classes[v.it.Class].Name,
			PromptTokens: int(v.it.PromptTokens), MaxTokens: int(v.it.MaxTokens), Arrival: v.arrival(), Requeue: m.requeue,
		}
		if f.prefix {
			req.Blocks = v.promptBlocks()
		}
		tk, err := s.m.Arrive(f.now, req)
		if err != nil {
			if v.abandoned {
				return // its client has gone: nobody to answer
			}
			st := result.StatusRejected
			if f.direct {
				st = refusal(err)
			} else if !errors.Is(err, scheduler.ErrQueueFull) && !errors.Is(err, scheduler.ErrRejected) {
				st = result.StatusError
			}
			f.end(v, st, err.Error(), f.at(ns(f.now)+f.hop))
			return
		}
		v.ticket = tk
		s.byTicket.put(tk, v)
		s.needStep = true
	case mAdmitted:
		f.start(m.v, m.n)
	case mPreempt:
		f.preempt(m.v, m.tk)
	case mAdd:
		a := m.a
		v := a.v
		err := a.eng.eng.Add(sim.SeqSpec{
			ID: a.id, PromptTokens: int(v.it.PromptTokens) + v.sent,
			MaxTokens: int(v.it.MaxTokens) - v.sent, Priority: f.prio[v.it.Class],
			Blocks: v.promptBlocks(),
		})
		if err != nil {
			v.live--
			if !a.detached {
				f.detach(a)
				f.send(msg{kind: mFinish, v: v, tk: v.ticket, out: scheduler.Failed})
				f.end(v, result.StatusError, err.Error(), f.at(ns(f.now)+f.hop))
			}
			return
		}
		f.byEng[a.id] = a
		f.touch(a.eng)
	case mAbort:
		a := m.a
		if f.byEng[a.id] == nil {
			return // it finished before the abort landed; counted then
		}
		e := a.eng
		if !e.eng.Abort(a.id) {
			// It finishes in the step in flight: a fleet counts it at the
			// step's end; the single host stops reading it at once, so
			// the step finishes it for nobody.
			if f.direct {
				f.release(a)
			}
			return
		}
		lost := a.computed + e.inFlight(a.id)
		f.release(a)
		f.lose(a, lost)
		f.touch(e)
	case mProgress:
		f.progress(m.v, m.tk, m.n, m.requeue)
	case mFinish:
		s := f.sched(m.v)
		s.byTicket.remove(m.tk)
		s.m.Finish(f.now, m.tk, m.out)
		s.needStep = true
	case mCancel:
		// Its arrival or requeue, sent before, has been delivered: the
		// ticket is the current one, waiting or admitted meanwhile.
		s := f.sched(m.v)
		if tk := m.v.ticket; s.byTicket.get(tk) == m.v {
			s.byTicket.remove(tk)
			s.m.Cancel(f.now, tk)
			s.needStep = true
		}
	}
}

// progress reports v's n tokens to its scheduler; first marks the
// attempt's first token, after which the scheduler steps.
func (f *fleet) progress(v *vreq, tk scheduler.Ticket, n int, first bool) {
	s := f.sched(v)
	s.m.Progress(f.now, tk, scheduler.Progress{FirstToken: true, Tokens: n})
	s.needStep = s.needStep || first
}

// release is the engine done with a: it no longer holds it.
func (f *fleet) release(a *attempt) {
	f.byEng[a.id] = nil
	a.v.live--
}

// lose books the work of a cancelled attempt as recomputed.
func (f *fleet) lose(a *attempt, lost int) {
	if a.abandoned {
		return
	}
	f.c.recomputed += int64(lost)
	a.v.rec.RecomputedTokens += lost
}

// start is the proxy acting on an admission: it picks the engine (the
// lease's endpoint, or least-request) and sends the request there, from
// scratch or as a continuation.
func (f *fleet) start(v *vreq, ep int) {
	if v.abandoned {
		return // the withdrawal on its way to the scheduler releases the lease
	}
	v.running(f.classes[v.it.Class].Name)
	if !v.wasAdmit {
		v.wasAdmit, v.queued = true, f.now.Sub(v.arrival())
	}
	v.admitted, v.schedAt = f.now, time.Time{}
	if ep < 0 {
		ep = f.leastRequest(int(v.proxy))
	}
	if f.routed != nil && !v.routed {
		v.routed = true
		f.routed.observe(ep, v.item(), v.promptBlocks())
	}
	e := f.engines[ep]
	if f.out != nil {
		f.out[v.proxy][ep]++
	}
	f.nextEng++
	a := &attempt{v: v, eng: e, id: f.nextEng}
	v.live++
	f.byEng = append(f.byEng, nil)
	v.att = a
	f.send(msg{kind: mAdd, a: a})
}

// leastRequest is the proxy's host choice under pool routing: the engine
// with the fewest of its requests outstanding, ties in round-robin order.
func (f *fleet) leastRequest(p int) int {
	out := f.out[p]
	n := len(out)
	best := f.rr[p]
	for k := 1; k < n; k++ {
		if i := (f.rr[p] + k) % n; out[i] < out[best] {
			best = i
		}
	}
	f.rr[p] = (best + 1) % n
	return best
}

// detach ends the proxy's interest in an attempt.
func (f *fleet) detach(a *attempt) {
	a.detached = true
	if a.v.att == a {
		a.v.att = nil
	}
	if f.out != nil {
		f.out[a.v.proxy][a.eng.index]--
	}
}

// preempt is the proxy acting on a preemption as the gateway does:
// cancel upstream, release the lease as preempted and queue again at the
// front of the class.
func (f *fleet) preempt(v *vreq, tk scheduler.Ticket) {
	if f.direct {
		f.preemptNow(v, tk)
		return
	}
	if v.abandoned {
		return // its client gave up; the release is on its way
	}
	a := v.att
	if a == nil || v.done || v.ticket != tk {
		// It finished before the preemption reached the proxy; its finish
		// is on the way to the scheduler.
		f.c.lateFinish++
		return
	}
	f.detach(a)
	f.send(msg{kind: mAbort, a: a})
	f.send(msg{kind: mFinish, v: v, tk: tk, out: scheduler.Preempted})
	f.send(msg{kind: mArrive, v: v, requeue: true})
	f.c.preemptions++
	v.rec.Preemptions++
	if v.sent == 0 {
		f.c.requeues++
	} else {
		f.c.continuations++
	}
}

// preemptNow is the single host acting on a preemption: it cancels the
// engine's sequence first and, when that stopped it, releases the lease as
// preempted and queues the request again; a sequence that finishes in the
// step in flight completes instead (a late finish).
func (f *fleet) preemptNow(v *vreq, tk scheduler.Ticket) {
	if v == nil || v.att == nil {
		return
	}
	a := v.att
	e := a.eng
	if !e.eng.Abort(a.id) {
		f.c.lateFinish++
		return
	}
	lost := a.computed + e.inFlight(a.id)
	f.detach(a)
	f.release(a)
	f.touch(e)
	s := f.sched(v)
	s.byTicket.remove(tk)
	s.m.Finish(f.now, tk, scheduler.Preempted)
	f.c.preemptions++
	f.lose(a, lost)
	v.rec.Preemptions++
	if v.sent == 0 {
		f.c.requeues++
	} else {
		f.c.continuations++
	}
	f.deliver(msg{kind: mArrive, v: v, requeue: true})
}

// touch marks an engine to be looked at for a new step.
func (f *fleet) touch(e *fleetEngine) {
	if !e.dirty {
		e.dirty = true
		f.dirty = append(f.dirty, e)
	}
}

// stepEnded applies the events of e's step that ended at now.
func (f *fleet) stepEnded(e *fleetEngine) {
	e.stepping = false
	client := ns(f.now) + f.hop // the proxy sees it a hop later
	// Load every attempt and request of the step before acting on any:
	// independent loads overlap their cache misses, where the loop below
	// takes them one after the other.
	var touch int
	if f.tokensMatter && f.hop == 0 {
		// Every token goes to the scheduler: load its entries too.
		for _, ev := range e.events {
			if a := f.byEng[ev.ID]; a != nil {
				touch += a.v.sent + f.sched(a.v).m.Warm(a.v.ticket)
			}
		}
	} else {
		for _, ev := range e.events {
			if a := f.byEng[ev.ID]; a != nil {
				touch += a.v.sent
			}
		}
	}
	f.touched += touch
	for _, ev := range e.events {
		a := f.byEng[ev.ID]
		if a == nil {
			continue // aborted while the step ran
		}
		f.c.computed += int64(ev.Scheduled)
		a.computed += int(ev.Scheduled)
		if ev.Flags.Has(sim.EvPreempted) {
			a.computed = 0
		}
		if a.detached {
			if ev.Flags.Has(sim.EvFinished) {
				f.release(a)
				f.lose(a, a.computed)
			}
			continue
		}
		v := a.v
		if f.lateForClient(v, client) {
			// The proxy would get it after the client gave up, when it
			// has cancelled the attempt (timeout.go); the engine is done
			// with a finished one all the same.
			if ev.Flags.Has(sim.EvFinished) {
				f.release(a)
			}
			continue
		}
		if ev.Flags.Has(sim.EvFirstScheduled) {
			v.schedAt = e.stepStart
		}
		if ev.Flags.Has(sim.EvToken) {
			v.sent++
			e.util.CompletedTokens++
			if v.sent == 1 {
				v.rec.FirstTokenNS = client
				v.upstream = time.Duration(client - ns(v.admitted))
				v.waitEng, v.prefill = v.schedAt.Sub(v.admitted), time.Duration(client-ns(v.schedAt))
			}
			if f.recordAll {
				if v.rec.ChunkNS == nil {
					// One token per chunk, MaxTokens in all: one allocation.
					v.rec.ChunkNS = make([]int64, 0, max(1, int(v.it.MaxTokens)))
				}
				v.rec.ChunkNS = append(v.rec.ChunkNS, client)
			}
			// The attempt's first token may free prefill budget; later
			// ones are read only by a preemptive policy.
			if !a.progressed || f.tokensMatter {
				if f.hop == 0 {
					f.progress(v, v.ticket, v.sent, !a.progressed) // as sendBack would
				} else {
					f.sendBack(msg{kind: mProgress, v: v, tk: v.ticket, n: v.sent, requeue: !a.progressed})
				}
			}
			a.progressed = true
		}
		if ev.Flags.Has(sim.EvFinished) {
			f.release(a)
			f.detach(a)
			e.util.Requests++
			v.dropBlocks() // finished: nothing sends its prompt again
			f.sendBack(msg{kind: mFinish, v: v, tk: v.ticket, out: scheduler.Done})
			f.end(v, result.StatusOK, "", f.at(client))
		}
	}
	f.touch(e)
	f.ended = append(f.ended, e)
}

// startStep starts e's next step at now.
func (f *fleet) startStep(e *fleetEngine) error {
	r := e.eng.Step(f.now)
	if len(r.Events) == 0 || r.Duration <= 0 {
		return fmt.Errorf("simulate: engine %s made no progress at %v with %d running, %d waiting", e.name, f.now.Sub(epoch), e.eng.Running(), e.eng.Waiting())
	}
	e.events = append(e.events[:0], r.Events...)
	e.stepStart, e.stepEnd, e.stepping = r.Start, r.End(), true
	e.util.busy += r.Duration
	e.util.KVPeak = max(e.util.KVPeak, e.eng.KVUsage())
	e.util.RunningPeak = max(e.util.RunningPeak, e.eng.Running())
	heap.Push(&f.steps, e)
	return nil
}

// tick re-derives the limits from the engines' load, as the hosts'
// capacity watchers do from /metrics: per endpoint (with its load report
// for the picker), or once for the pool from the summed load. Each
// proxy's own scheduler gets its share of every limit (layout.go).
func (f *fleet) tick() {
	for _, s := range f.ss {
		f.c.bounds.add(s.m.Bounds(poolName))
	}
	if f.routing == RoutingPool {
		var s capacity.Sample
		kv := 0.0
		for _, e := range f.engines {
			s.Running += float64(e.eng.Running())
			s.Waiting += float64(e.eng.Waiting())
			kv += e.eng.KVUsage()
		}
		s.KVUsage = kv / float64(len(f.engines))
		s.HasRunning, s.HasWaiting, s.HasKV = true, true, true
		if next := f.rule.Next(f.limit, s); next != f.limit {
			f.limit = next
			for _, s := range f.ss {
				s.needStep = true
				_ = s.m.SetLimit(poolName, share(next, len(f.ss), s.index, 0)) // the pool exists
			}
			f.c.limitMin = min(f.c.limitMin, next)
		}
		return
	}
	sum := 0
	for _, e := range f.engines {
		s := capacity.Sample{
			Running: float64(e.eng.Running()), Waiting: float64(e.eng.Waiting()), KVUsage: e.eng.KVUsage(),
			HasRunning: true, HasWaiting: true, HasKV: true,
		}
		if next := f.rule.Next(e.limit, s); next != e.limit {
			e.limit = next
			for _, s := range f.ss {
				s.needStep = true
				_ = s.m.SetEndpointLimit(poolName, e.name, share(next, len(f.ss), s.index, e.index)) // the endpoint exists
			}
		}
		for _, s := range f.ss {
			_ = s.m.SetEndpointLoad(poolName, e.name, scheduler.EndpointLoad{Running: e.eng.Running(), Waiting: e.eng.Waiting(), KVUsage: e.eng.KVUsage()})
		}
		sum += e.limit
	}
	f.c.limitMin = min(f.c.limitMin, sum)
}

// decide steps the machines until they have nothing more to decide at
// now; their decisions leave for the proxies.
func (f *fleet) decide() {
	for _, s := range f.ss {
		f.decideOn(s)
	}
}

func (f *fleet) decideOn(s *fleetSched) {
	if !f.stepAll && !s.needStep && (s.wake.IsZero() || s.wake.After(f.now)) {
		return
	}
	s.needStep = false
	for {
		d := s.m.Step(f.now)
		s.wake = d.Wake
		for _, tk := range d.Admitted {
			v := s.byTicket.get(tk)
			ep := -1
			if f.routing != RoutingPool {
				name, _ := s.m.EndpointOf(tk)
				ep = f.epIndex[name]
			}
			f.send(msg{kind: mAdmitted, v: v, n: ep})
		}
		for _, rj := range d.Rejected {
			if v := s.byTicket.get(rj.Ticket); v != nil {
				s.byTicket.remove(rj.Ticket)
				st := result.StatusRejected
				if f.direct {
					st = refusal(rj.Err)
				}
				f.end(v, st, rj.Err.Error(), f.at(ns(f.now)+f.hop))
			}
		}
		for _, tk := range d.Preempted {
			f.send(msg{kind: mPreempt, v: s.byTicket.get(tk), tk: tk})
		}
		if len(d.Preempted) == 0 || f.hop > 0 {
			return
		}
		// Without a hop the proxies act at once, and the machine decides
		// again with the slots released.
		f.deliverDue()
	}
}

// deliverDue delivers every message due by now, in order (one-hop
// messages first at equal times).
func (f *fleet) deliverDue() bool {
	t := ns(f.now)
	any := false
	for {
		a, okA := f.q.peek()
		b, okB := f.q2.peek()
		switch {
		case okA && a <= t && (!okB || a <= b):
			f.deliver(f.q.pop())
		case okB && b <= t:
			f.deliver(f.q2.pop())
		default:
			return any
		}
		any = true
	}
}

// run feeds items (sorted by At) through the proxies, the machine and the
// engines until every one has ended, and returns every record, in item
// order; f.reqs holds every request.
func (f *fleet) run(items []workload.Item) ([]result.Record, error) {
	i := 0
	next := func() (workload.Item, bool) {
		if i == len(items) {
			return workload.Item{}, false
		}
		i++
		return items[i-1], true
	}
	recs := make([]result.Record, 0, len(items))
	reqs := make([]vreq, 0, len(items))
	err := f.stream(next, len(items), hasSegments(items), func(v *vreq) error {
		recs = append(recs, *v.rec)
		reqs = append(reqs, *v)
		return nil
	})
	if err != nil {
		return nil, err
	}
	for i := range reqs {
		reqs[i].rec = &recs[i]
	}
	f.reqs = reqs
	return recs, nil
}

// stream feeds the n items that next yields (sorted by At) through the
// proxies, the machine and the engines until every one has ended, and
// hands each request to out in item order once nothing changes its
// record any more (ended, and no attempt of it left in an engine); out
// must not keep v. segments says whether any item has prompt segments.
// It keeps only the requests from the oldest one not yet handed over to
// the latest arrival.
func (f *fleet) stream(next func() (workload.Item, bool), n int, segments bool, out func(v *vreq) error) error {
	var win window
	f.routed = nil
	if segments && !f.direct {
		f.routed = newRoutedCaches(len(f.engines), f.engines[0].eng.Config().KVCacheTokens/sim.BlockSize)
	}
	nextIt, hasNext := next()
	handed := 0
	// handOver gives out every request from the oldest not yet handed
	// over that is final; all: every one left, at the end of the run.
	handOver := func(all bool) error {
		for handed < win.n {
			v := win.at(handed)
			if !all && (!v.done || v.live > 0) {
				break
			}
			if err := out(v); err != nil {
				return err
			}
			handed++
		}
		keep := handed
		if f.clients.after > 0 {
			keep = min(keep, f.clients.head)
		}
		win.dropBefore(keep)
		return nil
	}
	f.now = epoch
	var nextTick time.Time
	if f.interval > 0 {
		// The watchers' first samples start from nothing.
		for _, e := range f.engines {
			e.limit = 0
		}
		f.limit = 0
		nextTick = epoch
	}
	var guard progressGuard
	active := f.now
	for f.finished < n {
		at := time.Time{}
		pick := func(t time.Time) {
			if !t.IsZero() && (at.IsZero() || t.Before(at)) {
				at = t
			}
		}
		if hasNext {
			pick(epoch.Add(nextIt.At))
		}
		if len(f.steps) > 0 {
			pick(f.steps[0].stepEnd)
		}
		if t, ok := f.q.peek(); ok {
			pick(f.at(t))
		}
		if t, ok := f.q2.peek(); ok {
			pick(f.at(t))
		}
		pick(f.clients.next(&win))
		for _, s := range f.ss {
			pick(s.wake)
		}
		pick(nextTick)
		if at.IsZero() {
			return fmt.Errorf("simulate: stuck at %v with %d of %d requests ended", f.now.Sub(epoch), f.finished, n)
		}
		at, err := guard.advance(f.now, at)
		if err != nil {
			return err
		}
		f.now = at
		f.ended = f.ended[:0]
		for len(f.steps) > 0 && !f.steps[0].stepEnd.After(f.now) {
			f.stepEnded(heap.Pop(&f.steps).(*fleetEngine))
			active = f.now
		}
		for hasNext && !epoch.Add(nextIt.At).After(f.now) {
			if win.n == n {
				return fmt.Errorf("simulate: more than the %d requests counted", n)
			}
			f.send(msg{kind: mArrive, v: win.push(nextIt, win.n%f.proxies)})
			nextIt, hasNext = next()
			active = f.now
		}
		for v := f.clients.due(&win, f.now); v != nil; v = f.clients.due(&win, f.now) {
			f.abandon(v)
			active = f.now
		}
		if f.now.Sub(active) > maxIdle {
			return fmt.Errorf("simulate: stuck at %v with %d of %d requests ended", f.now.Sub(epoch), f.finished, n)
		}
		if !nextTick.IsZero() && !nextTick.After(f.now) {
			f.tick()
			nextTick = nextTick.Add(f.interval)
		}
		if f.late {
			// The engine goes on with its next step as soon as it has
			// published this one's tokens; what the host admits in
			// reaction to them reaches it for the step after.
			for _, e := range f.ended {
				if !e.eng.Idle() {
					if err := f.startStep(e); err != nil {
						return err
					}
				}
			}
		}
		for {
			f.deliverDue()
			f.decide()
			if t, ok := f.q.peek(); !ok || t > ns(f.now) {
				break
			}
		}
		for _, e := range f.dirty {
			e.dirty = false
			if !e.stepping && !e.eng.Idle() {
				if err := f.startStep(e); err != nil {
					return err
				}
			}
		}
		f.dirty = f.dirty[:0]
		if err := handOver(false); err != nil {
			return err
		}
	}
	if win.n < n {
		return fmt.Errorf("simulate: %d requests counted, %d came", n, win.n)
	}
	for _, e := range f.engines {
		f.c.enginePreempts += e.eng.Preemptions()
		f.c.engineRecomputed += e.eng.RecomputedTokens()
		f.c.steps += e.eng.Steps()
	}
	return handOver(true)
}

// EndpointUtil is what one engine of a run did.
type EndpointUtil struct {
	Name string `json:"name"`
	// BusyS is the time the engine spent in steps; BusyFraction relates
	// it to the run's virtual span.
	BusyS        float64 `json:"busy_s"`
	BusyFraction float64 `json:"busy_fraction"`
	// KVPeak is the highest KV-cache usage (0..1) at the start of a step;
	// RunningPeak the most sequences running.
	KVPeak      float64 `json:"kv_peak"`
	RunningPeak int     `json:"running_peak"`
	// CompletedTokens are the output tokens it delivered to clients;
	// Requests the requests it finished.
	CompletedTokens int64 `json:"completed_tokens"`
	Requests        int   `json:"requests"`
	busy            time.Duration
}

// utilisation is the per-engine record of a run and the imbalance of
// completed tokens (max over mean; 1 is perfect balance, 0 when none).
func utilisation(es []EndpointUtil, span time.Duration) ([]EndpointUtil, float64) {
	var sum, top int64
	for i := range es {
		u := &es[i]
		u.BusyS = u.busy.Seconds()
		if span > 0 {
			u.BusyFraction = float64(u.busy) / float64(span)
		}
		sum += u.CompletedTokens
		top = max(top, u.CompletedTokens)
	}
	if sum == 0 {
		return es, 0
	}
	return es, float64(top) / (float64(sum) / float64(len(es)))
}
