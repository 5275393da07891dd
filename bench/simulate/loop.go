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
	// vrun: nil until the request is first admitted or ends, its fields
	// read only from then on.
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
	rec      *result.Record // record
	sent     int            // output tokens the client received, over all attempts
	admitted time.Time      // latest admission
	queued   time.Duration  // arrival → first admission
	upstream time.Duration  // latest admission → first token, when the first token came from it
	schedAt  time.Time      // start of the step that first computed the current attempt
	waitEng  time.Duration  // of upstream: admission → schedAt (step in flight, engine queue)
	prefill  time.Duration  // of upstream: schedAt → first token (its prefill steps)
	wasAdmit bool
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

// counters are what one run measured beyond the records.
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

// predictPrefill predicts admission→first token from the single engine's
// timing model: the prompt's chunks, each in a step with the engine's
// current decode batch.
func (f *fleet) predictPrefill(_ string, prompt int) time.Duration {
	eng := f.engines[0].eng
	cfg := eng.Config()
	batch := eng.Running()
	ctx := 0
	if batch > 0 {
		ctx = int(eng.KVUsage() * float64(cfg.KVCacheTokens) / float64(batch))
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
		d += eng.Timing().StepDuration(&s)
	}
	return d
}

// ns is t as nanoseconds since the run's start.
func ns(t time.Time) int64 { return int64(t.Sub(epoch)) }

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
