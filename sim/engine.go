package sim

import (
	"errors"
	"fmt"
	"time"

	"github.com/llmesh/llmesh/kvblock"
)

// BlockSize is the KV cache block size in tokens (vLLM's default).
const BlockSize = 16

// Policy orders the engine's waiting queue.
type Policy int

const (
	// FCFS serves waiting requests in arrival order; under KV pressure the
	// most recently scheduled running request is preempted.
	FCFS Policy = iota
	// Priority serves the lowest Priority value first (ties by arrival);
	// under KV pressure the running request with the highest value (latest
	// arrival among equals) is preempted.
	Priority
)

// ParsePolicy maps "fcfs" and "priority" (vLLM's --scheduling-policy
// values) to a Policy.
func ParsePolicy(s string) (Policy, error) {
	switch s {
	case "", "fcfs":
		return FCFS, nil
	case "priority":
		return Priority, nil
	}
	return 0, fmt.Errorf("scheduling policy %q unknown (want fcfs or priority)", s)
}

func (p Policy) String() string {
	if p == Priority {
		return "priority"
	}
	return "fcfs"
}

// Config sizes an engine. Zero fields take the defaults named.
type Config struct {
	// MaxNumSeqs caps running sequences per step (default 256).
	MaxNumSeqs int
	// MaxNumBatchedTokens caps the tokens computed per step, prefill chunks
	// and decodes together (default 8192).
	MaxNumBatchedTokens int
	// KVCacheTokens is the KV cache capacity in tokens, rounded down to
	// whole blocks (default: the profile's).
	KVCacheTokens int
	// MaxModelLen caps prompt plus output tokens of one sequence (default:
	// the profile's MaxContext, lowered to what the KV cache holds so that
	// one sequence can always run; set explicitly above that, it is an
	// error, as in vLLM).
	MaxModelLen int
	// Policy orders the waiting queue (default FCFS).
	Policy Policy
	// LongPrefillTokenThreshold caps the prefill chunk one sequence gets in
	// one step, as vLLM's --long-prefill-token-threshold does in its V1
	// scheduler: for running and waiting sequences alike, the tokens still
	// to compute are cut to the threshold before the step's token budget is
	// applied, so one long prompt cannot fill a step and the sequences after
	// it (an urgent prompt, the decodes) share the step. 0 means no cap
	// (vLLM's default with one partial prefill at a time).
	LongPrefillTokenThreshold int
	// DisablePrefixCaching turns the prefix cache off, as vLLM's
	// --no-enable-prefix-caching does. When on (the default, as in vLLM
	// V1), a sequence with Blocks is admitted with the longest run of its
	// leading full blocks that are cached (never the block holding its last
	// token) and computes only the rest; its blocks, once computed, stay
	// hittable after it ends until the KV cache needs them (least recently
	// freed first).
	DisablePrefixCaching bool
}

// Errors Add returns.
var (
	ErrDuplicateID = errors.New("sim: duplicate sequence id")
	ErrTooLong     = errors.New("sim: prompt too long")
	ErrBadRequest  = errors.New("sim: bad sequence")
)

// SeqSpec describes a sequence to add.
type SeqSpec struct {
	// ID names the sequence in events and Abort; unique among live ones.
	ID uint64
	// PromptTokens is the prompt length (at least 1).
	PromptTokens int
	// MaxTokens is the most output tokens to generate (at least 1); the
	// engine also stops at MaxModelLen.
	MaxTokens int
	// Priority orders the waiting queue under the Priority policy: lower
	// values first.
	Priority int
	// Blocks are the kvblock hashes of the sequence's full blocks of
	// BlockSize tokens, prompt first, then (optionally) the output it is
	// expected to generate. The prefix cache looks up the prompt's blocks
	// and keeps each block once it is computed; a block past the end of
	// Blocks is never shared. Nil: the sequence shares nothing, as if
	// prefix caching were off for it.
	Blocks []kvblock.Hash
	// Tokens are the token ids Blocks were hashed from, used only to
	// report stored blocks (SetBlockEvents); nil is fine otherwise.
	Tokens []uint32
}

// Event is what happened to one sequence in a step. Token events take
// effect at the step's end.
type Event struct {
	ID uint64
	// Scheduled is the number of tokens computed for it this step (prefill
	// chunk length, 1 for a decode); 0 for a preemption.
	Scheduled int32
	// Flags says what happened (EvFirstScheduled, EvToken, EvFirstToken,
	// EvFinished, EvPreempted).
	Flags EventFlags
	// Output is the number of output tokens generated so far, after this
	// step.
	Output int32
}

// EventFlags is a bit set of what happened to a sequence in a step.
type EventFlags uint8

const (
	// EvFirstScheduled: computed for the first time (its first prefill chunk).
	EvFirstScheduled EventFlags = 1 << iota
	// EvToken: emitted one output token.
	EvToken
	// EvFirstToken: that token was its first.
	EvFirstToken
	// EvFinished: done; it has left the engine.
	EvFinished
	// EvPreempted: evicted from the KV cache; it waits again and will
	// recompute its prompt and the output generated so far.
	EvPreempted
)

// Has reports whether all bits of f2 are set.
func (f EventFlags) Has(f2 EventFlags) bool { return f&f2 == f2 }

// StepResult is one engine step. Events and its slice are reused by the
// next Step call.
type StepResult struct {
	// Start is when the step began; Duration its predicted time. Token
	// events happen at Start+Duration.
	Start    time.Time
	Duration time.Duration
	Shape    StepShape
	Events   []Event
}

// End is when the step's tokens are out.
func (r *StepResult) End() time.Time { return r.Start.Add(r.Duration) }

type seqState uint8

const (
	stateWaiting seqState = iota
	stateRunning
	stateDone
)

type seq struct {
	// What every step reads of a running sequence comes first: chunk,
	// allocate and finish touch one or two cache lines, not three.
	id        uint64
	prompt    int
	output    int // output tokens generated
	computed  int // tokens whose KV is in the cache
	maxTokens int
	schedN    int            // tokens scheduled in the current step
	table     []int32        // KV blocks held, in token order
	hashed    int            // leading blocks of table registered or hit
	hashes    []kvblock.Hash // SeqSpec.Blocks
	state     seqState
	scheduled bool // ever scheduled
	priority  int
	order     uint64   // arrival order, for ties
	ids       []uint32 // SeqSpec.Tokens
	lost      int      // tokens computed when last preempted
	heapIdx   int
}

// tokens is prompt plus generated output: what must be in the cache before
// the next token can be sampled.
func (s *seq) tokens() int { return s.prompt + s.output }

// Engine is a continuous-batching engine in the manner of vLLM's V1
// scheduler. It is a pure state machine: nothing happens between calls, and
// it is not safe for concurrent use (one owner drives it).
type Engine struct {
	timing      *TimingModel
	cfg         Config
	totalBlocks int
	pool        *blockPool
	hitBuf      []int32 // lookup scratch

	seqs    map[uint64]*seq
	spare   []*seq // released sequences, with their tables, for Add to reuse
	spareN  int    // most spares kept (MaxNumSeqs)
	running []*seq
	waiting waitQueue
	nextOrd uint64

	res     StepResult
	sched   []*seq // sequences scheduled in the current step
	touched int    // Step's loads ahead of use land here, read by nothing

	preemptions      int64
	recomputedTokens int64
	prefixQueries    int64
	prefixHits       int64
	steps            int64
}

// NewEngine returns an idle engine with profile's timing and cfg's limits.
func NewEngine(p *Profile, cfg Config) (*Engine, error) {
	if p == nil || p.Timing == nil {
		return nil, fmt.Errorf("sim: profile with a timing model required")
	}
	if cfg.MaxNumSeqs == 0 {
		cfg.MaxNumSeqs = 256
	}
	if cfg.MaxNumBatchedTokens == 0 {
		cfg.MaxNumBatchedTokens = 8192
	}
	if cfg.KVCacheTokens == 0 {
		cfg.KVCacheTokens = p.KVCacheTokens
	}
	capacity := cfg.KVCacheTokens / BlockSize * BlockSize
	if cfg.MaxModelLen == 0 {
		cfg.MaxModelLen = min(p.MaxContext, capacity)
	}
	var errs []error
	if cfg.MaxModelLen > capacity && capacity >= BlockSize {
		errs = append(errs, fmt.Errorf("max_model_len: %d is more than the KV cache holds (%d tokens)", cfg.MaxModelLen, capacity))
	}
	if cfg.MaxNumSeqs < 1 {
		errs = append(errs, fmt.Errorf("max_num_seqs: %d must be at least 1", cfg.MaxNumSeqs))
	}
	if cfg.MaxNumBatchedTokens < 1 {
		errs = append(errs, fmt.Errorf("max_num_batched_tokens: %d must be at least 1", cfg.MaxNumBatchedTokens))
	}
	if cfg.LongPrefillTokenThreshold < 0 {
		errs = append(errs, fmt.Errorf("long_prefill_token_threshold: %d must not be negative", cfg.LongPrefillTokenThreshold))
	}
	if cfg.KVCacheTokens < BlockSize {
		errs = append(errs, fmt.Errorf("kv_cache_tokens: %d must be at least one block (%d)", cfg.KVCacheTokens, BlockSize))
	}
	if cfg.MaxModelLen < 2 {
		errs = append(errs, fmt.Errorf("max_model_len: %d must be at least 2", cfg.MaxModelLen))
	}
	if cfg.Policy != FCFS && cfg.Policy != Priority {
		errs = append(errs, fmt.Errorf("policy: %d unknown", cfg.Policy))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	e := &Engine{timing: p.Timing, cfg: cfg, seqs: map[uint64]*seq{}, spareN: cfg.MaxNumSeqs}
	e.totalBlocks = cfg.KVCacheTokens / BlockSize
	e.pool = newBlockPool(e.totalBlocks)
	e.waiting.priority = cfg.Policy == Priority
	return e, nil
}

// Config is the engine's configuration with defaults filled in.
func (e *Engine) Config() Config { return e.cfg }

// Add queues a sequence. It fails if the ID is live, the sizes are not
// positive, or the prompt cannot fit the model length or the whole cache.
func (e *Engine) Add(s SeqSpec) error {
	if _, ok := e.seqs[s.ID]; ok {
		return fmt.Errorf("%w: %d", ErrDuplicateID, s.ID)
	}
	if s.PromptTokens < 1 || s.MaxTokens < 1 {
		return fmt.Errorf("%w: prompt tokens %d and max tokens %d must be at least 1", ErrBadRequest, s.PromptTokens, s.MaxTokens)
	}
	if s.PromptTokens >= e.cfg.MaxModelLen {
		return fmt.Errorf("%w: %d prompt tokens, the model's context is %d", ErrTooLong, s.PromptTokens, e.cfg.MaxModelLen)
	}
	if blocksFor(s.PromptTokens+1) > e.totalBlocks {
		return fmt.Errorf("%w: %d prompt tokens exceed the KV cache of %d tokens", ErrTooLong, s.PromptTokens, e.totalBlocks*BlockSize)
	}
	// A released sequence is reused, its block table's array too: a fleet
	// adds millions of sequences, a few hundred live per engine.
	var q *seq
	var table []int32
	if n := len(e.spare); n > 0 {
		q, table = e.spare[n-1], e.spare[n-1].table[:0]
		e.spare[n-1] = nil
		e.spare = e.spare[:n-1]
	} else {
		q = new(seq)
	}
	*q = seq{id: s.ID, prompt: s.PromptTokens, maxTokens: s.MaxTokens, priority: s.Priority, order: e.nextOrd, heapIdx: -1, hashes: s.Blocks, ids: s.Tokens, table: table}
	e.nextOrd++
	e.seqs[s.ID] = q
	e.waiting.push(q)
	return nil
}

// Abort removes a sequence wherever it is and frees its KV blocks at once.
// It reports whether the sequence was live.
func (e *Engine) Abort(id uint64) bool {
	q, ok := e.seqs[id]
	if !ok {
		return false
	}
	switch q.state {
	case stateWaiting:
		e.waiting.remove(q)
	case stateRunning:
		for i, r := range e.running {
			if r == q {
				e.removeRunning(i)
				break
			}
		}
	}
	e.release(q)
	return true
}

// release ends q: its blocks go back to the pool and q to the spares
// (nothing holds it past the step that released it: Step drops it from
// running before it returns, and Add is not called within a step).
func (e *Engine) release(q *seq) {
	e.pool.release(q.table)
	q.table = q.table[:0]
	q.state = stateDone
	q.hashes, q.ids = nil, nil
	delete(e.seqs, q.id)
	if len(e.spare) < e.spareN {
		e.spare = append(e.spare, q)
	}
}

// Idle reports whether there is nothing to run or wait for.
func (e *Engine) Idle() bool { return len(e.running) == 0 && e.waiting.len() == 0 }

// Running is the number of sequences holding a running slot.
func (e *Engine) Running() int { return len(e.running) }

// Waiting is the number of queued (new or preempted) sequences.
func (e *Engine) Waiting() int { return e.waiting.len() }

// KVUsage is the fraction of KV cache blocks in use, in [0, 1].
func (e *Engine) KVUsage() float64 {
	return float64(e.totalBlocks-e.pool.free) / float64(e.totalBlocks)
}

// PrefixQueries is the total of prompt tokens looked up in the prefix
// cache: each sequence with Blocks counts its prompt once, when first
// admitted. (vLLM counts a request again at each step it waits for blocks
// after its lookup, and counts lookups of preempted requests apart; here a
// resumed sequence's lookup counts in neither counter, so hits over queries
// is the share of prompt tokens served from the cache.)
func (e *Engine) PrefixQueries() int64 { return e.prefixQueries }

// PrefixHits is the total of prompt tokens first admissions found cached.
func (e *Engine) PrefixHits() int64 { return e.prefixHits }

// Preemptions is the total number of preemptions so far.
func (e *Engine) Preemptions() int64 { return e.preemptions }

// RecomputedTokens is the total of tokens recomputed after preemptions:
// those computed when preempted, less those a resumed sequence found in
// the prefix cache.
func (e *Engine) RecomputedTokens() int64 { return e.recomputedTokens }

// Steps is the number of non-empty steps run.
func (e *Engine) Steps() int64 { return e.steps }

// Timing is the engine's timing model.
func (e *Engine) Timing() *TimingModel { return e.timing }

func blocksFor(tokens int) int { return (tokens + BlockSize - 1) / BlockSize }

// allocate makes q hold enough blocks for n more computed tokens.
func (e *Engine) allocate(q *seq, n int) bool {
	need := blocksFor(q.computed+n) - len(q.table)
	if need <= 0 {
		return true
	}
	if need > e.pool.free {
		return false
	}
	for range need {
		q.table = append(q.table, e.pool.take())
	}
	return true
}

// admit tries to start waiting sequence q (new or preempted) within
// budget tokens: it looks up q's cached prefix, and takes the hit blocks
// and new blocks for its first chunk if the free queue has them all (a hit
// on a free block takes it from the queue too, as in vLLM). It returns the
// tokens scheduled, or 0 if q does not fit.
func (e *Engine) admit(q *seq, budget int) int {
	hit := e.hitBuf[:0]
	if !e.cfg.DisablePrefixCaching && q.hashes != nil {
		hit = e.pool.lookup(hit, q.hashes, kvblock.Cacheable(q.tokens(), BlockSize))
	}
	e.hitBuf = hit
	cached := len(hit) * BlockSize
	q.computed = cached
	n := min(e.chunk(q), budget)
	if blocksFor(cached+n)-len(hit)+e.pool.evictable(hit) > e.pool.free {
		q.computed = 0
		return 0
	}
	for _, b := range hit {
		e.pool.hold(b)
	}
	if want := blocksFor(min(q.prompt+q.maxTokens, e.cfg.MaxModelLen)); cap(q.table) < want {
		q.table = make([]int32, 0, want)
	}
	q.table = append(q.table[:0], hit...)
	q.hashed = len(hit)
	e.allocate(q, n)
	if q.hashes != nil && !e.cfg.DisablePrefixCaching {
		if !q.scheduled {
			e.prefixQueries += int64(q.prompt)
			e.prefixHits += int64(cached)
		} else {
			e.recomputedTokens -= int64(min(cached, q.lost))
		}
	}
	return n
}

// register names q's blocks that its computed tokens have filled, so that
// later sequences hit them.
func (e *Engine) register(q *seq) {
	if e.cfg.DisablePrefixCaching {
		return
	}
	if e.pool.events == nil {
		for end := min(q.computed/BlockSize, len(q.hashes)); q.hashed < end; q.hashed++ {
			e.pool.register(q.table[q.hashed], q.hashes[q.hashed])
		}
		return
	}
	// Runs of newly named blocks are reported as one store each, with the
	// hash of the block before the run as its parent (blockevents.go).
	run := -1
	end := min(q.computed/BlockSize, len(q.hashes))
	for ; q.hashed < end; q.hashed++ {
		if e.pool.register(q.table[q.hashed], q.hashes[q.hashed]) {
			if run < 0 {
				run = q.hashed
			}
			continue
		}
		if run >= 0 {
			e.storedRun(q, run, q.hashed)
			run = -1
		}
	}
	if run >= 0 {
		e.storedRun(q, run, end)
	}
}

func (e *Engine) preempt(q *seq) {
	e.pool.release(q.table)
	q.table = q.table[:0]
	q.hashed = 0
	e.recomputedTokens += int64(q.computed)
	q.lost = q.computed
	q.computed = 0
	q.state = stateWaiting
	e.preemptions++
	e.waiting.pushFront(q)
	e.res.Events = append(e.res.Events, Event{ID: q.id, Flags: EvPreempted, Output: int32(q.output)})
}

// victim picks the running sequence to preempt: the last one under FCFS,
// the lowest priority (latest arrival among equals) under Priority.
func (e *Engine) victim() int {
	if !e.waiting.priority {
		return len(e.running) - 1
	}
	v := len(e.running) - 1
	for i := v - 1; i >= 0; i-- {
		r, b := e.running[i], e.running[v]
		if r.priority > b.priority || (r.priority == b.priority && r.order > b.order) {
			v = i
		}
	}
	return v
}

// Step schedules and runs one step starting at now: running sequences
// first (decodes and unfinished prefill chunks, preempting under KV
// pressure), then, if nothing was preempted, waiting ones while slots, token
// budget and blocks last. It returns the step's events and its predicted
// duration; a step with nothing to do has zero duration and no events. The
// engine's state moves to the step's end at once. The result is valid until
// the next call.
func (e *Engine) Step(now time.Time) *StepResult {
	r := &e.res
	r.Start, r.Duration, r.Shape, r.Events = now, 0, StepShape{}, r.Events[:0]
	e.sched = e.sched[:0]
	budget := e.cfg.MaxNumBatchedTokens
	preempted := false
	// Load every running sequence before acting on any: independent loads
	// overlap their cache misses (64 engines' sequences do not stay in
	// the cache between one engine's steps), where the loop below takes
	// them one after the other.
	touch := 0
	for _, q := range e.running {
		touch += q.computed + len(q.table)
	}
	e.touched += touch
	for i := 0; i < len(e.running) && budget > 0; {
		q := e.running[i]
		n := min(e.chunk(q), budget)
		ok := true
		for !e.allocate(q, n) {
			v := e.victim()
			vq := e.running[v]
			e.removeRunning(v)
			if vq.schedN > 0 {
				budget += e.unschedule(vq)
			}
			e.preempt(vq)
			preempted = true
			if vq == q {
				ok = false
				break
			}
			if v < i {
				i--
			}
		}
		if !ok {
			break
		}
		e.sched = append(e.sched, q)
		q.schedN = n
		budget -= n
		i++
	}
	if !preempted {
		for budget > 0 && len(e.running) < e.cfg.MaxNumSeqs && e.waiting.len() > 0 {
			q := e.waiting.peek()
			n := e.admit(q, budget)
			if n == 0 {
				break
			}
			e.waiting.pop()
			q.state = stateRunning
			e.running = append(e.running, q)
			e.sched = append(e.sched, q)
			q.schedN = n
			budget -= n
		}
	}
	if len(e.sched) == 0 {
		return r
	}
	finished := false
	for _, q := range e.sched {
		finished = e.finish(q) || finished
	}
	e.steps++
	r.Duration = e.timing.StepDuration(&r.Shape)
	if finished {
		j := 0
		for _, q := range e.running {
			if q.state != stateDone {
				e.running[j] = q
				j++
			}
		}
		clear(e.running[j:])
		e.running = e.running[:j]
	}
	return r
}

// chunk is how many tokens q asks for in a step before the step's budget:
// what it has left to compute, cut to LongPrefillTokenThreshold.
func (e *Engine) chunk(q *seq) int {
	n := q.tokens() - q.computed
	if t := e.cfg.LongPrefillTokenThreshold; t > 0 && n > t {
		n = t
	}
	return n
}

func (e *Engine) removeRunning(i int) {
	copy(e.running[i:], e.running[i+1:])
	e.running[len(e.running)-1] = nil
	e.running = e.running[:len(e.running)-1]
}

// unschedule takes q out of this step's schedule and returns its tokens.
func (e *Engine) unschedule(q *seq) int {
	n := q.schedN
	q.schedN = 0
	for i, s := range e.sched {
		if s == q {
			e.sched = append(e.sched[:i], e.sched[i+1:]...)
			break
		}
	}
	return n
}

// finish applies q's scheduled tokens: adds them to the step's shape,
// samples a token if its cache now holds all its tokens, and releases it if
// it is done. It reports whether q finished.
func (e *Engine) finish(q *seq) bool {
	n := q.schedN
	q.schedN = 0
	ev := Event{ID: q.id, Scheduled: int32(n)}
	if !q.scheduled {
		q.scheduled = true
		ev.Flags |= EvFirstScheduled
	}
	if n == 1 && q.output > 0 && q.computed+1 == q.tokens() {
		e.res.Shape.AddDecode(q.computed + 1)
	} else {
		e.res.Shape.AddPrefill(n, q.computed)
	}
	q.computed += n
	e.register(q)
	done := false
	if q.computed == q.tokens() {
		q.output++
		ev.Flags |= EvToken
		if q.output == 1 {
			ev.Flags |= EvFirstToken
		}
		if q.output >= q.maxTokens || q.tokens() >= e.cfg.MaxModelLen {
			ev.Flags |= EvFinished
			e.release(q)
			done = true
		}
	}
	ev.Output = int32(q.output)
	e.res.Events = append(e.res.Events, ev)
	return done
}
