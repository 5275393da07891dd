// Package sim is llmesh's simulated LLM engine: a continuous-batching
// engine model in the manner of vLLM's V1 scheduler, driven by a timing
// model fitted to H200 measurements. It is pure and clock-free: the caller
// passes the time into every step, so the same engine runs behind the real
// servers (sim/server, one engine goroutine on an injected clock) and in
// virtual time (policy evaluation in a discrete-event loop).
//
// # Timing model
//
// One step's time is a sum of physically shaped terms whose coefficients
// are fitted once, jointly for all built-in profiles, to the embedded
// calibration files (sim/calibration: the H200 shape measurements and
// h200-prefix-cached.jsonl, prefills after a cached
// prefix, less its held-out points): a fixed cost per step; per-layer
// overhead; the linear layers as a roofline between reading the weights
// once (bandwidth) and their FLOPs over all the step's tokens (compute),
// with a smooth knee; KV bytes read by decode attention over bandwidth;
// causal attention FLOPs of prefill chunks among their own tokens;
// attention FLOPs of prefill chunks over the tokens of their sequence
// already cached (a prefix-cache hit, earlier chunks), at a rate of their
// own; and a fixed cost per attention call
// per layer (the decode batch is one call, each prefill chunk one). Models
// measured with fewer layers than they have (llama3-70b: 10 of 80) are
// fitted at the measured layer count and predicted at the full one, so the
// per-layer part scales by 8 and the logits head does not. `llmesh sim
// fit-report` prints the fit; `llmesh sim predict` one step.
//
// # Engine model
//
//	p, _ := sim.LookupProfile("llama3-8b-h200")
//	e, _ := sim.NewEngine(p, sim.Config{MaxNumSeqs: 256, MaxNumBatchedTokens: 8192, Policy: sim.FCFS})
//	_ = e.Add(sim.SeqSpec{ID: 1, PromptTokens: 900, MaxTokens: 128, Priority: 0})
//	for now := start; !e.Idle(); {
//		r := e.Step(now)          // schedule + run one step starting at now
//		for _, ev := range r.Events { ... }   // tokens are out at r.End()
//		now = r.End()
//	}
//
// Each Step schedules running sequences first (decodes, or the next chunk
// of an unfinished prefill) within MaxNumBatchedTokens, allocating KV
// blocks of 16 tokens; when blocks run out it preempts (FCFS: the last
// running sequence; Priority: the highest priority value, latest arrival
// among equals), freeing all its blocks and queueing it again at the front
// (FCFS) or by its original key (Priority) so that it recomputes its prompt
// and the output generated so far. If nothing was preempted, waiting
// sequences are admitted while slots (MaxNumSeqs), token budget and blocks
// last, with chunked prefill. Sequences added or aborted between steps take
// effect in the next step; Abort frees blocks at once.
//
// Prefix caching (on unless Config.DisablePrefixCaching) follows vLLM V1:
// the blocks live in a pool with reference counts (blockpool.go); a
// sequence with SeqSpec.Blocks names each full block once it is computed,
// and is admitted with the longest run of its leading blocks found cached
// (whole blocks, never the one holding its last token), computing only the
// rest. Freed blocks keep their names in an LRU free queue until a new
// block is needed. Events report, per
// sequence, first scheduling, tokens, the first token, finishing and
// preemptions. The step result's slices are reused by the next Step.
//
// An Engine is not safe for concurrent use: exactly one goroutine owns it.
// The servers own theirs in one engine-loop goroutine (see sim/server).
package sim
