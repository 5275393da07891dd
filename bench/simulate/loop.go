package simulate

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/llmesh/llmesh/bench/result"
	"github.com/llmesh/llmesh/bench/trace"
	"github.com/llmesh/llmesh/bench/workload"
	"github.com/llmesh/llmesh/kvblock"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/capacity"
	"github.com/llmesh/llmesh/sim"
)

// epoch is virtual time zero. Any fixed instant works; records are relative
// to it.
var epoch = time.Unix(1_800_000_000, 0)

// poolName is the one pool the simulated host schedules into.
const poolName = "engine"

// vreq is one client request across its admissions (requeues and
// continuations after preemption). A fleet far past saturation holds a
// million of them waiting (window.go), so what a request needs while it
// waits is kept here, small, and what only an admitted or ended request
// needs (its record, its timings, its engine sequence) is in its vrun,
// allocated at its first admission or when it ends without one.
type vreq struct {
	it     item
	ticket scheduler.Ticket
	att    *attempt // fleet.go: the attempt the proxy follows; nil when none
	// vrun: in a fleet nil until the request is first admitted or ends,
	// its fields read only from then on; the loop gives every request
	// its vrun at the start (it keeps every record anyway).
	*vrun
	proxy int32 // fleet.go: the host it arrived at
	// live: fleet.go: its attempts an engine holds or is about to (an
	// attempt lost there adds to the record).
	live int32
	done bool
	// abandoned: the client gave up at the workload's timeout (timeout.go).
	abandoned bool
	routed    bool // fleet.go: counted by the routed prefix model
}

// item is a workload.Item as a request keeps it: its sizes in 32 bits
// (workloads and traces bound lengths at 10,000,000 tokens:
// workload.MaxLength, trace.MaxTokens), and what only some items have
// (prompt segments, a session) behind a pointer, nil when the item has
// none.
type item struct {
	At                      time.Duration
	Index                   int
	PromptTokens, MaxTokens int32
	Class                   int32
	Warmup                  bool
	x                       *itemExtra
}

// itemExtra is the rest of an item that has prompt segments or a session,
// and its prompt's block hashes once computed.
type itemExtra struct {
	segments []trace.Segment
	session  uint64
	turn     int
	// blocks: fleet.go: the prompt's block hashes, computed once for the
	// scheduler, the engine and the routed model (hasBlocks), dropped
	// when the request finishes.
	blocks    []kvblock.Hash
	hasBlocks bool
}

func compact(it workload.Item) item {
	c := item{At: it.At, Index: it.Index, PromptTokens: int32(it.PromptTokens), MaxTokens: int32(it.MaxTokens),
		Class: int32(it.Class), Warmup: it.Warmup}
	if it.Segments != nil || it.Session != 0 || it.Turn != 0 {
		c.x = &itemExtra{segments: it.Segments, session: it.Session, turn: it.Turn}
	}
	return c
}

// item is v's item as the workload gave it.
func (v *vreq) item() workload.Item {
	c := v.it
	it := workload.Item{Index: c.Index, Class: int(c.Class), At: c.At, PromptTokens: int(c.PromptTokens),
		MaxTokens: int(c.MaxTokens), Warmup: c.Warmup}
	if c.x != nil {
		it.Segments, it.Session, it.Turn = c.x.segments, c.x.session, c.x.turn
	}
	return it
}

// vrun is the part of a request that only an admitted or ended one has.
type vrun struct {
	rec      *result.Record // record, in a fleet; the loop's slice in the loop
	engID    uint64         // current engine sequence; 0 when not in the engine
	sent     int            // output tokens the client received, over all attempts
	computed int            // tokens the current engine attempt holds in its KV cache
	admitted time.Time      // latest admission
	queued   time.Duration  // arrival → first admission
	upstream time.Duration  // latest admission → first token, when the first token came from it
	schedAt  time.Time      // start of the step that first computed the current attempt
	waitEng  time.Duration  // of upstream: admission → schedAt (step in flight, engine queue)
	prefill  time.Duration  // of upstream: schedAt → first token (its prefill steps)
	wasAdmit bool
	// reported: loop.go: the latest admission's first token has been
	// reported to the machine.
	reported bool
	record   result.Record
}

// arrival is when v arrived at its host.
func (v *vreq) arrival() time.Time { return epoch.Add(v.it.At) }

// id is v's request id for the scheduler: the same string on every
// arrival of v (a requeue keeps it), not kept in v.
func (v *vreq) id() string { return strconv.Itoa(v.it.Index) }

// running gives v its vrun, with its record filled from the item, unless
// it has one; class is the item's class name.
func (v *vreq) running(class string) {
	if v.vrun != nil {
		return
	}
	it := v.it
	r := &vrun{record: result.Record{
		Index: it.Index, Class: class, Warmup: it.Warmup,
		PromptTokens: int(it.PromptTokens), MaxTokens: int(it.MaxTokens),
		IntendedNS: int64(it.At), SentNS: int64(it.At),
	}}
	r.rec = &r.record
	v.vrun = r
}

// counters are what one loop measured beyond the records.
type counters struct {
	computed         int64 // tokens computed by the engine (prefill + decode)
	recomputed       int64 // tokens lost to scheduler preemptions
	preemptions      int   // scheduler preemptions acted on
	requeues         int   // preempted before the first token: restarted
	continuations    int   // preempted mid-stream: continued with prompt+generated
	lateFinish       int   // preempted while finishing in the step in flight
	enginePreempts   int64 // the engine's own KV-pressure preemptions
	engineRecomputed int64
	steps            int64
	limitMin         int // lowest pool limit the capacity rule set
	timeoutsQueued   int // given up by the client while waiting (timeout.go)
	timeoutsRunning  int // given up by the client while running
	end              time.Time
	bounds           boundsSamples
}

// boundsSamples accumulates the pool's admission bounds in effect at each
// metrics tick (derived ones move with the traffic).
type boundsSamples struct {
	n                  int
	reserve, prefill   int64
	reserveHist        map[int]int
	prefillMin, prefMx int
}

func (b *boundsSamples) add(x scheduler.Bounds) {
	if b.reserveHist == nil {
		b.reserveHist = map[int]int{}
		b.prefillMin = x.MaxPrefillTokens
	}
	b.n++
	b.reserve += int64(x.ReserveUrgent)
	b.prefill += int64(x.MaxPrefillTokens)
	b.reserveHist[x.ReserveUrgent]++
	b.prefillMin = min(b.prefillMin, x.MaxPrefillTokens)
	b.prefMx = max(b.prefMx, x.MaxPrefillTokens)
}

// loop is one discrete-event run of the scheduler machine in front of the
// engine model. Everything happens in virtual time: events are the next
// arrival, the end of the engine step in flight, the machine's wake-up and
// the capacity rule's metrics tick, processed in that order at equal times.
type loop struct {
	m         *scheduler.Machine
	eng       *sim.Engine
	classes   []workload.Class
	prio      []int
	rule      capacity.Rule
	interval  time.Duration
	byTicket  map[scheduler.Ticket]*vreq
	byEng     map[uint64]*vreq
	nextEng   uint64
	events    []sim.Event
	stepping  bool
	stepStart time.Time
	stepEnd   time.Time
	wake      time.Time
	limit     int
	c         counters
	now       time.Time
	finished  int
	onFinish  func(v *vreq) // optional
	recordAll bool          // keep every token time (ITL statistics)
	late      bool          // Options.LateHandoff
	reqs      []vreq        // the run's requests, for the TTFT breakdown
	util      EndpointUtil
	clients   clientTimeouts
	// tokensMatter: the machine reads progress beyond an admission's first
	// token (scheduler.Machine.TokensMatter); the host reports it only then.
	tokensMatter bool
}

// newLoop builds the machine and the engine for one run.
func newLoop(w *workload.Workload, pol scheduler.Policy, o Options) (*loop, error) {
	prof, err := sim.LookupProfile(o.Profile)
	if err != nil {
		return nil, err
	}
	eng, err := sim.NewEngine(prof, o.Engine)
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	cfg := schedulerConfig(w, pol, o)
	l := &loop{
		eng: eng, classes: w.Classes,
		byTicket: map[scheduler.Ticket]*vreq{}, byEng: map[uint64]*vreq{},
		rule: capacity.Rule{Max: o.MaxInflight}, interval: o.MetricsInterval,
		limit: o.MaxInflight, recordAll: true, late: o.LateHandoff,
	}
	l.c.limitMin = o.MaxInflight
	for _, c := range w.Classes {
		l.prio = append(l.prio, c.Priority)
	}
	if o.Predictor == PredictTiming {
		cfg.PrefillPredictor = l.predictPrefill
	}
	if l.m, err = scheduler.NewMachine(cfg); err != nil {
		return nil, fmt.Errorf("scheduler: %w", err)
	}
	l.tokensMatter = l.m.TokensMatter(poolName)
	return l, nil
}

// schedulerConfig is the host's scheduler for w: one pool, the workload's
// classes with their SLOs; as in llmesh demo, every class but the most
// urgent one is preemptible.
func schedulerConfig(w *workload.Workload, pol scheduler.Policy, o Options) scheduler.Config {
	best := 0
	for i, c := range w.Classes {
		if c.Priority < w.Classes[best].Priority {
			best = i
		}
	}
	cfg := scheduler.Config{Pools: []scheduler.PoolConfig{{
		Name: poolName, MaxInflight: o.MaxInflight, MaxInflightTokens: o.MaxInflightTokens,
		MaxPrefillTokens: o.MaxPrefillTokens, ReserveUrgent: o.ReserveUrgent, StaticBounds: o.StaticBounds,
		OverloadRelease: o.OverloadRelease,
		Policy:          pol, Aging: o.Aging, Preemption: o.Preemption,
	}}}
	for i, c := range w.Classes {
		cfg.Classes = append(cfg.Classes, scheduler.ClassConfig{
			Name: c.Name, Priority: c.Priority, TTFT: c.TTFT, TPOT: c.TPOT,
			Preemptible: i != best && c.Priority != w.Classes[best].Priority,
		})
	}
	return cfg
}

// predictPrefill predicts admission→first token from the engine's timing
// model: the prompt's chunks, each in a step with the engine's current
// decode batch.
func (l *loop) predictPrefill(_ string, prompt int) time.Duration {
	cfg := l.eng.Config()
	batch := l.eng.Running()
	ctx := 0
	if batch > 0 {
		ctx = int(l.eng.KVUsage() * float64(cfg.KVCacheTokens) / float64(batch))
	}
	budget := max(1, cfg.MaxNumBatchedTokens-batch)
	if t := cfg.LongPrefillTokenThreshold; t > 0 {
		budget = min(budget, t)
	}
	var d time.Duration
	for done := 0; done < max(1, prompt); done += budget {
		var s sim.StepShape
		s.AddDecodes(batch, ctx+1)
		s.AddPrefill(min(budget, prompt-done), done)
		d += l.eng.Timing().StepDuration(&s)
	}
	return d
}

// ns is t as nanoseconds since the run's start.
func ns(t time.Time) int64 { return int64(t.Sub(epoch)) }

// arrive hands a new or requeued request to the machine.
func (l *loop) arrive(v *vreq, requeue bool) {
	tk, err := l.m.Arrive(l.now, scheduler.Request{
		ID: v.id(), Pool: poolName, Class: l.classes[v.it.Class].Name,
		PromptTokens: int(v.it.PromptTokens), MaxTokens: int(v.it.MaxTokens), Arrival: v.arrival(), Requeue: requeue,
	})
	if err != nil {
		l.end(v, refusal(err), err.Error())
		return
	}
	v.ticket = tk
	l.byTicket[tk] = v
}

// refusal is the status of a request the scheduler refused, split as the
// real-time harness splits them: llmesh's own full queue is queue_full,
// any other refusal (max wait) rejected; the simulated engine itself never
// answers 429.
func refusal(err error) result.Status {
	switch {
	case errors.Is(err, scheduler.ErrQueueFull):
		return result.StatusQueueFull
	case errors.Is(err, scheduler.ErrRejected):
		return result.StatusRejected
	}
	return result.StatusError
}

// end finishes a request for the client.
func (l *loop) end(v *vreq, st result.Status, msg string) {
	v.done = true
	v.rec.Status, v.rec.Error = st, msg
	v.rec.DoneNS = ns(l.now)
	v.rec.OutputTokens = v.sent
	l.finished++
	if l.onFinish != nil {
		l.onFinish(v)
	}
}

// admit starts an admitted request in the engine: from scratch when it has
// sent nothing yet, else as the gateway's continuation (prompt plus the
// generated text, the remaining max_tokens).
func (l *loop) admit(tk scheduler.Ticket) {
	v := l.byTicket[tk]
	if !v.wasAdmit {
		v.wasAdmit, v.queued = true, l.now.Sub(v.arrival())
	}
	v.admitted, v.schedAt, v.reported = l.now, time.Time{}, false
	l.nextEng++
	v.engID, v.computed = l.nextEng, 0
	err := l.eng.Add(sim.SeqSpec{
		ID: v.engID, PromptTokens: int(v.it.PromptTokens) + v.sent,
		MaxTokens: int(v.it.MaxTokens) - v.sent, Priority: l.prio[v.it.Class],
		Blocks: promptBlocks(v.item()),
	})
	if err != nil {
		v.engID = 0
		delete(l.byTicket, tk)
		l.m.Finish(l.now, tk, scheduler.Failed)
		l.end(v, result.StatusError, err.Error())
		return
	}
	l.byEng[v.engID] = v
}

// preempt acts on a preemption as the gateway does: cancel upstream, release
// the admission as preempted and queue again at the front of the class.
func (l *loop) preempt(tk scheduler.Ticket) {
	v := l.byTicket[tk]
	if v == nil || v.engID == 0 {
		return
	}
	if !l.eng.Abort(v.engID) {
		// It finished in the step in flight: the response completes before
		// the cancellation lands, and its Finish comes with the step's end.
		l.c.lateFinish++
		return
	}
	lost := v.computed
	if l.stepping {
		// The step in flight computed for it too; that work is thrown away.
		for _, ev := range l.events {
			if ev.ID == v.engID {
				lost += int(ev.Scheduled)
			}
		}
	}
	delete(l.byEng, v.engID)
	delete(l.byTicket, tk)
	v.engID = 0
	l.m.Finish(l.now, tk, scheduler.Preempted)
	l.c.preemptions++
	l.c.recomputed += int64(lost)
	v.rec.Preemptions++
	v.rec.RecomputedTokens += lost
	if v.sent == 0 {
		l.c.requeues++
	} else {
		l.c.continuations++
	}
	l.arrive(v, true)
}

// stepEnded applies the events of the engine step that ended at now.
func (l *loop) stepEnded() {
	l.stepping = false
	t := ns(l.now)
	for _, ev := range l.events {
		v := l.byEng[ev.ID]
		if v == nil {
			continue // aborted while the step ran
		}
		l.c.computed += int64(ev.Scheduled)
		v.computed += int(ev.Scheduled)
		if ev.Flags.Has(sim.EvPreempted) {
			v.computed = 0
		}
		if ev.Flags.Has(sim.EvFirstScheduled) {
			v.schedAt = l.stepStart
		}
		if ev.Flags.Has(sim.EvToken) {
			v.sent++
			l.util.CompletedTokens++
			if v.rec.FirstTokenNS == 0 {
				v.rec.FirstTokenNS = t
				v.upstream = l.now.Sub(v.admitted)
				v.waitEng, v.prefill = v.schedAt.Sub(v.admitted), l.now.Sub(v.schedAt)
			}
			if l.recordAll {
				v.rec.ChunkNS = append(v.rec.ChunkNS, t)
			}
			if !v.reported || l.tokensMatter {
				l.m.Progress(l.now, v.ticket, scheduler.Progress{FirstToken: true, Tokens: v.sent})
				v.reported = true
			}
		}
		if ev.Flags.Has(sim.EvFinished) {
			delete(l.byEng, ev.ID)
			delete(l.byTicket, v.ticket)
			v.engID = 0
			l.m.Finish(l.now, v.ticket, scheduler.Done)
			l.util.Requests++
			l.end(v, result.StatusOK, "")
		}
	}
}

// tick re-derives the pool's limit from the engine's load, as the hosts'
// capacity watcher does from /metrics.
func (l *loop) tick() {
	s := capacity.Sample{
		Running: float64(l.eng.Running()), Waiting: float64(l.eng.Waiting()), KVUsage: l.eng.KVUsage(),
		HasRunning: true, HasWaiting: true, HasKV: true,
	}
	l.c.bounds.add(l.m.Bounds(poolName))
	next := l.rule.Next(l.limit, s)
	if next != l.limit {
		l.limit = next
		_ = l.m.SetLimit(poolName, next) // the pool exists
		l.c.limitMin = min(l.c.limitMin, next)
	}
}

// decide steps the machine until it has nothing more to decide at now.
func (l *loop) decide() {
	for {
		d := l.m.Step(l.now)
		l.wake = d.Wake
		for _, tk := range d.Admitted {
			l.admit(tk)
		}
		for _, rj := range d.Rejected {
			if v := l.byTicket[rj.Ticket]; v != nil {
				delete(l.byTicket, rj.Ticket)
				l.end(v, refusal(rj.Err), rj.Err.Error())
			}
		}
		if len(d.Preempted) == 0 {
			return
		}
		for _, tk := range d.Preempted {
			l.preempt(tk)
		}
	}
}

// maxSameTime bounds the events processed at one virtual instant; more means
// a component keeps asking to be woken at the same time.
const maxSameTime = 1_000_000

// progressGuard moves an event loop's clock: never backwards, and at most
// maxSameTime events at one instant (a loop that stops advancing is a bug,
// reported rather than spun on).
type progressGuard struct {
	last time.Time
	same int
}

// advance returns the time the loop moves to from now towards next.
func (g *progressGuard) advance(now, next time.Time) (time.Time, error) {
	if next.Before(now) {
		next = now
	}
	if next.Equal(g.last) {
		if g.same++; g.same > maxSameTime {
			return next, fmt.Errorf("simulate: no progress at %v", next.Sub(epoch))
		}
	} else {
		g.same, g.last = 0, next
	}
	return next, nil
}

// maxIdle is how long virtual time may pass with requests waiting but no
// arrival and no engine step before the run is declared stuck.
const maxIdle = time.Hour

// startStep starts the engine's next step at now.
func (l *loop) startStep() error {
	r := l.eng.Step(l.now)
	if len(r.Events) == 0 || r.Duration <= 0 {
		return fmt.Errorf("simulate: engine made no progress at %v with %d running, %d waiting", l.now.Sub(epoch), l.eng.Running(), l.eng.Waiting())
	}
	l.events = append(l.events[:0], r.Events...)
	l.stepStart, l.stepEnd, l.stepping = r.Start, r.End(), true
	l.util.busy += r.Duration
	l.util.KVPeak = max(l.util.KVPeak, l.eng.KVUsage())
	l.util.RunningPeak = max(l.util.RunningPeak, l.eng.Running())
	return nil
}

// run feeds items (sorted by At) through the machine and the engine until
// every one has ended.
func (l *loop) run(items []workload.Item) ([]result.Record, error) {
	recs := make([]result.Record, len(items))
	reqs := make([]vreq, len(items))
	runs := make([]vrun, len(items))
	l.reqs = reqs
	for i, it := range items {
		recs[i] = result.Record{
			Index: it.Index, Class: l.classes[it.Class].Name, Warmup: it.Warmup,
			PromptTokens: it.PromptTokens, MaxTokens: it.MaxTokens,
			IntendedNS: int64(it.At), SentNS: int64(it.At),
		}
		runs[i].rec = &recs[i]
		reqs[i] = vreq{it: compact(it), vrun: &runs[i]}
	}
	l.now = epoch
	var nextTick time.Time
	if l.interval > 0 {
		l.limit = 0 // the watcher's first sample starts from nothing
		nextTick = epoch
	}
	arrived := 0
	arr := &reqSlice{s: reqs}
	var guard progressGuard
	active := l.now
	for l.finished < len(items) {
		next := time.Time{}
		pick := func(t time.Time) {
			if !t.IsZero() && (next.IsZero() || t.Before(next)) {
				next = t
			}
		}
		if arrived < len(items) {
			pick(reqs[arrived].arrival())
		}
		if l.stepping {
			pick(l.stepEnd)
		}
		arr.n = arrived
		pick(l.clients.next(arr))
		pick(l.wake)
		if !nextTick.IsZero() {
			pick(nextTick)
		}
		if next.IsZero() {
			return nil, fmt.Errorf("simulate: stuck at %v with %d of %d requests ended", l.now.Sub(epoch), l.finished, len(items))
		}
		next, err := guard.advance(l.now, next)
		if err != nil {
			return nil, err
		}
		l.now = next
		ended := false
		if l.stepping && !l.stepEnd.After(l.now) {
			l.stepEnded()
			active, ended = l.now, true
		}
		for arrived < len(items) && !reqs[arrived].arrival().After(l.now) {
			l.arrive(&reqs[arrived], false)
			arrived++
			active = l.now
		}
		arr.n = arrived
		for v := l.clients.due(arr, l.now); v != nil; v = l.clients.due(arr, l.now) {
			l.abandon(v)
			active = l.now
		}
		if l.now.Sub(active) > maxIdle {
			return nil, fmt.Errorf("simulate: stuck at %v with %d of %d requests ended", l.now.Sub(epoch), l.finished, len(items))
		}
		if !nextTick.IsZero() && !nextTick.After(l.now) {
			l.tick()
			nextTick = nextTick.Add(l.interval)
		}
		if ended && l.late && !l.eng.Idle() {
			// The engine goes on with its next step as soon as it has
			// published this one's tokens; what the host admits in
			// reaction to them reaches it for the step after.
			if err := l.startStep(); err != nil {
				return nil, err
			}
		}
		l.decide()
		if !l.stepping && !l.eng.Idle() {
			if err := l.startStep(); err != nil {
				return nil, err
			}
		}
	}
	l.c.end = l.now
	l.c.enginePreempts = l.eng.Preemptions()
	l.c.engineRecomputed = l.eng.RecomputedTokens()
	l.c.steps = l.eng.Steps()
	return recs, nil
}
