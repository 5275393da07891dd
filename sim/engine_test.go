package sim

import (
	"testing"
	"time"
)

func testProfile(t testing.TB) *Profile {
	t.Helper()
	p, err := LookupProfile(DefaultProfile)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func newTestEngine(t testing.TB, cfg Config) *Engine {
	t.Helper()
	e, err := NewEngine(testProfile(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// run steps the engine in virtual time until idle and returns per-id
// events and the virtual end time.
func run(t testing.TB, e *Engine, start time.Time, maxSteps int) (map[uint64][]Event, time.Time) {
	t.Helper()
	now := start
	evs := map[uint64][]Event{}
	for i := 0; !e.Idle(); i++ {
		if i >= maxSteps {
			t.Fatalf("engine not idle after %d steps (running %d waiting %d)", maxSteps, e.Running(), e.Waiting())
		}
		r := e.Step(now)
		if r.Duration <= 0 {
			t.Fatalf("step %d: no progress with running %d waiting %d", i, e.Running(), e.Waiting())
		}
		for _, ev := range r.Events {
			evs[ev.ID] = append(evs[ev.ID], ev)
		}
		now = r.End()
	}
	return evs, now
}

func TestEngineGeneratesMaxTokens(t *testing.T) {
	e := newTestEngine(t, Config{})
	for id := uint64(1); id <= 3; id++ {
		if err := e.Add(SeqSpec{ID: id, PromptTokens: 100, MaxTokens: 5}); err != nil {
			t.Fatal(err)
		}
	}
	evs, _ := run(t, e, time.Unix(0, 0), 100)
	for id := uint64(1); id <= 3; id++ {
		tokens, first, fin := 0, 0, 0
		for _, ev := range evs[id] {
			if ev.Flags.Has(EvToken) {
				tokens++
			}
			if ev.Flags.Has(EvFirstToken) {
				first++
			}
			if ev.Flags.Has(EvFinished) {
				fin++
			}
		}
		if tokens != 5 || first != 1 || fin != 1 {
			t.Errorf("seq %d: tokens %d first %d finished %d, want 5 1 1", id, tokens, first, fin)
		}
		if !evs[id][0].Flags.Has(EvFirstScheduled) {
			t.Errorf("seq %d: first event %+v lacks EvFirstScheduled", id, evs[id][0])
		}
	}
	if e.KVUsage() != 0 || e.Running() != 0 {
		t.Errorf("after finishing: kv usage %v running %d, want 0 0", e.KVUsage(), e.Running())
	}
}

func TestEngineContinuousBatching(t *testing.T) {
	e := newTestEngine(t, Config{MaxNumSeqs: 2})
	for id := uint64(1); id <= 3; id++ {
		if err := e.Add(SeqSpec{ID: id, PromptTokens: 10, MaxTokens: 3}); err != nil {
			t.Fatal(err)
		}
	}
	r := e.Step(time.Unix(0, 0))
	if len(r.Events) != 2 || e.Running() != 2 || e.Waiting() != 1 {
		t.Fatalf("first step: %d events, running %d waiting %d; want 2, 2, 1", len(r.Events), e.Running(), e.Waiting())
	}
	if r.Shape.PrefillTokens != 20 || r.Shape.Decodes != 0 {
		t.Errorf("first step shape %+v, want 20 prefill tokens", r.Shape)
	}
	r = e.Step(r.End())
	if r.Shape.Decodes != 2 || r.Shape.PrefillTokens != 0 {
		t.Errorf("second step shape %+v, want 2 decodes", r.Shape)
	}
	r = e.Step(r.End()) // both finish (3rd token); seq 3 still waits: slots free only after the step
	if e.Running() != 0 || e.Waiting() != 1 {
		t.Errorf("third step: running %d waiting %d, want 0 1", e.Running(), e.Waiting())
	}
	r = e.Step(r.End())
	if len(r.Events) != 1 || r.Events[0].ID != 3 || r.Shape.PrefillTokens != 10 {
		t.Errorf("fourth step: %+v shape %+v, want seq 3 prefilling", r.Events, r.Shape)
	}
}

func TestEngineChunkedPrefillMixesDecodes(t *testing.T) {
	e := newTestEngine(t, Config{MaxNumBatchedTokens: 512})
	if err := e.Add(SeqSpec{ID: 1, PromptTokens: 100, MaxTokens: 50}); err != nil {
		t.Fatal(err)
	}
	r := e.Step(time.Unix(0, 0))
	if err := e.Add(SeqSpec{ID: 2, PromptTokens: 1200, MaxTokens: 2}); err != nil {
		t.Fatal(err)
	}
	// Seq 2 needs ceil(1200/511) = 3 steps of chunks beside seq 1's decode.
	var chunks []int32
	for i := 0; i < 3; i++ {
		r = e.Step(r.End())
		if r.Shape.Decodes != 1 {
			t.Fatalf("step %d: %d decodes, want 1", i, r.Shape.Decodes)
		}
		for _, ev := range r.Events {
			if ev.ID == 2 {
				chunks = append(chunks, ev.Scheduled)
				if i < 2 && ev.Flags.Has(EvToken) {
					t.Errorf("chunk %d emitted a token before the prompt was done", i)
				}
				if i == 2 && !ev.Flags.Has(EvFirstToken) {
					t.Errorf("last chunk: flags %b lack the first token", ev.Flags)
				}
			}
		}
		if got := int(r.Shape.PrefillTokens) + r.Shape.Decodes; got > 512 {
			t.Errorf("step %d computes %d tokens, over the budget of 512", i, got)
		}
	}
	if len(chunks) != 3 || chunks[0] != 511 || chunks[1] != 511 || chunks[2] != 178 {
		t.Errorf("chunks %v, want [511 511 178]", chunks)
	}
	// The mixed step costs more than the decode alone and less than both apart.
	var mixed, dec, pre StepShape
	mixed.AddDecode(150)
	mixed.AddPrefill(511, 0)
	dec.AddDecode(150)
	pre.AddPrefill(511, 0)
	tm := e.Timing()
	if m, d, p := tm.StepDuration(&mixed), tm.StepDuration(&dec), tm.StepDuration(&pre); m <= d || m <= p || m >= d+p {
		t.Errorf("mixed %v, decode %v, prefill %v: want max(d,p) < mixed < d+p", m, d, p)
	}
}

func TestEngineKVPreemptionRecomputes(t *testing.T) {
	// 10 blocks of 16 tokens: two sequences of 60-token prompts growing to
	// 100 tokens each cannot both stay.
	e := newTestEngine(t, Config{KVCacheTokens: 160})
	for id := uint64(1); id <= 2; id++ {
		if err := e.Add(SeqSpec{ID: id, PromptTokens: 60, MaxTokens: 40}); err != nil {
			t.Fatal(err)
		}
	}
	evs, _ := run(t, e, time.Unix(0, 0), 1000)
	if e.Preemptions() == 0 {
		t.Fatal("no preemption with a cache too small for both")
	}
	var preemptedID uint64
	for id, es := range evs {
		for _, ev := range es {
			if ev.Flags.Has(EvPreempted) {
				preemptedID = id
			}
		}
	}
	if preemptedID != 2 {
		t.Errorf("preempted seq %d, want 2 (FCFS evicts the latest)", preemptedID)
	}
	if e.RecomputedTokens() < 60 {
		t.Errorf("recomputed %d tokens, want at least the prompt (60)", e.RecomputedTokens())
	}
	for id := uint64(1); id <= 2; id++ {
		last := evs[id][len(evs[id])-1]
		if !last.Flags.Has(EvFinished) || last.Output != 40 {
			t.Errorf("seq %d last event %+v, want finished with 40 tokens", id, last)
		}
	}
}

func TestEnginePriorityOrderAndVictim(t *testing.T) {
	e := newTestEngine(t, Config{MaxNumSeqs: 1, Policy: Priority})
	_ = e.Add(SeqSpec{ID: 1, PromptTokens: 10, MaxTokens: 2, Priority: 5})
	_ = e.Add(SeqSpec{ID: 2, PromptTokens: 10, MaxTokens: 2, Priority: 0})
	_ = e.Add(SeqSpec{ID: 3, PromptTokens: 10, MaxTokens: 2, Priority: 0})
	var order []uint64
	now := time.Unix(0, 0)
	for !e.Idle() {
		r := e.Step(now)
		for _, ev := range r.Events {
			if ev.Flags.Has(EvFirstScheduled) {
				order = append(order, ev.ID)
			}
		}
		now = r.End()
	}
	if len(order) != 3 || order[0] != 2 || order[1] != 3 || order[2] != 1 {
		t.Errorf("schedule order %v, want [2 3 1]", order)
	}

	// Under KV pressure the low-priority running sequence is the victim even
	// though it arrived first.
	e = newTestEngine(t, Config{KVCacheTokens: 160, Policy: Priority})
	_ = e.Add(SeqSpec{ID: 1, PromptTokens: 60, MaxTokens: 40, Priority: 9})
	_ = e.Add(SeqSpec{ID: 2, PromptTokens: 60, MaxTokens: 40, Priority: 1})
	evs, _ := run(t, e, time.Unix(0, 0), 1000)
	for _, ev := range evs[2] {
		if ev.Flags.Has(EvPreempted) {
			t.Fatal("high-priority sequence was preempted")
		}
	}
	pre := false
	for _, ev := range evs[1] {
		pre = pre || ev.Flags.Has(EvPreempted)
	}
	if !pre {
		t.Error("low-priority sequence was not preempted")
	}
}

func TestEngineAbortFreesBlocks(t *testing.T) {
	e := newTestEngine(t, Config{})
	_ = e.Add(SeqSpec{ID: 1, PromptTokens: 1000, MaxTokens: 100})
	_ = e.Add(SeqSpec{ID: 2, PromptTokens: 1000, MaxTokens: 100})
	e.Step(time.Unix(0, 0))
	if e.KVUsage() == 0 {
		t.Fatal("no KV used after a prefill")
	}
	if !e.Abort(1) || !e.Abort(2) || e.Abort(2) {
		t.Fatal("abort results wrong")
	}
	if e.KVUsage() != 0 || !e.Idle() {
		t.Errorf("after aborts: kv %v idle %v", e.KVUsage(), e.Idle())
	}
	if r := e.Step(time.Unix(1, 0)); len(r.Events) != 0 || r.Duration != 0 {
		t.Errorf("idle step: %+v", r)
	}
}

func TestEngineRejectsBadSequences(t *testing.T) {
	if _, err := NewEngine(testProfile(t), Config{MaxModelLen: 100, KVCacheTokens: 64}); err == nil {
		t.Error("model length over the KV cache accepted")
	}
	if e := newTestEngine(t, Config{KVCacheTokens: 70}); e.Config().MaxModelLen != 64 {
		t.Errorf("default model length %d with a 70-token cache, want 64 (4 whole blocks)", e.Config().MaxModelLen)
	}
	e := newTestEngine(t, Config{MaxModelLen: 100, KVCacheTokens: 128})
	for _, s := range []SeqSpec{
		{ID: 1, PromptTokens: 0, MaxTokens: 1},
		{ID: 2, PromptTokens: 1, MaxTokens: 0},
		{ID: 3, PromptTokens: 100, MaxTokens: 1},
	} {
		if err := e.Add(s); err == nil {
			t.Errorf("Add(%+v) succeeded", s)
		}
	}
	if err := e.Add(SeqSpec{ID: 5, PromptTokens: 10, MaxTokens: 1}); err != nil {
		t.Fatal(err)
	}
	if err := e.Add(SeqSpec{ID: 5, PromptTokens: 10, MaxTokens: 1}); err == nil {
		t.Error("duplicate id accepted")
	}
	if _, err := NewEngine(testProfile(t), Config{MaxNumSeqs: -1, KVCacheTokens: 3}); err == nil {
		t.Error("bad config accepted")
	}
}

// BenchmarkEngineStep measures virtual-time engine steps with ~200 running
// sequences under a steady arrival stream; ns/seq-step is the cost per
// sequence per step.
func BenchmarkEngineStep(b *testing.B) {
	for _, pol := range []Policy{FCFS, Priority} {
		b.Run(pol.String(), func(b *testing.B) {
			e := newTestEngine(b, Config{Policy: pol})
			now := time.Unix(0, 0)
			id := uint64(0)
			seqSteps := 0
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for e.Running()+e.Waiting() < 220 {
					id++
					_ = e.Add(SeqSpec{ID: id, PromptTokens: 200 + int(id%7)*100, MaxTokens: 50 + int(id%13)*20, Priority: int(id % 3)})
				}
				r := e.Step(now)
				seqSteps += len(r.Events)
				now = r.End()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(seqSteps), "ns/seq-step")
			b.ReportMetric(float64(seqSteps)/float64(b.N), "seqs/step")
		})
	}
}

// checkInvariants verifies the engine's bookkeeping.
func checkInvariants(t *testing.T, e *Engine) {
	t.Helper()
	if err := e.checkBlocks(); err != nil {
		t.Fatal(err)
	}
	if len(e.running) > e.cfg.MaxNumSeqs {
		t.Fatalf("%d running over max %d", len(e.running), e.cfg.MaxNumSeqs)
	}
	if len(e.running)+e.waiting.len() != len(e.seqs) {
		t.Fatalf("running %d + waiting %d != live %d", len(e.running), e.waiting.len(), len(e.seqs))
	}
}

func TestEngineRandomWorkloadInvariants(t *testing.T) {
	for _, pol := range []Policy{FCFS, Priority} {
		t.Run(pol.String(), func(t *testing.T) {
			e := newTestEngine(t, Config{Policy: pol, MaxNumSeqs: 24, MaxNumBatchedTokens: 700, KVCacheTokens: 4096, MaxModelLen: 2048})
			rng := uint64(12345)
			next := func(n int) int { // xorshift, deterministic
				rng ^= rng << 13
				rng ^= rng >> 7
				rng ^= rng << 17
				return int(rng % uint64(n))
			}
			want := map[uint64]int{}
			got := map[uint64]int{}
			now := time.Unix(0, 0)
			id := uint64(0)
			aborted := 0
			for step := 0; step < 20000 && (id < 400 || !e.Idle()); step++ {
				for k := next(3); k > 0 && id < 400; k-- {
					id++
					s := SeqSpec{ID: id, PromptTokens: 1 + next(1500), MaxTokens: 1 + next(300), Priority: next(4)}
					if err := e.Add(s); err != nil {
						t.Fatal(err)
					}
					want[id] = min(s.MaxTokens, 2048-s.PromptTokens)
				}
				if next(50) == 0 && id > 0 {
					victim := 1 + uint64(next(int(id)))
					if e.Abort(victim) {
						delete(want, victim)
						delete(got, victim)
						aborted++
					}
				}
				r := e.Step(now)
				if n := int(r.Shape.PrefillTokens) + r.Shape.Decodes; n > 700 {
					t.Fatalf("step computes %d tokens, budget 700", n)
				}
				for _, ev := range r.Events {
					if ev.Flags.Has(EvToken) {
						got[ev.ID]++
						if int(ev.Output) != got[ev.ID] {
							t.Fatalf("seq %d: output %d after %d token events", ev.ID, ev.Output, got[ev.ID])
						}
					}
					if ev.Flags.Has(EvFinished) && got[ev.ID] != want[ev.ID] {
						t.Fatalf("seq %d finished with %d tokens, want %d", ev.ID, got[ev.ID], want[ev.ID])
					}
				}
				checkInvariants(t, e)
				if r.Duration > 0 {
					now = r.End()
				} else {
					now = now.Add(time.Millisecond)
				}
			}
			if !e.Idle() {
				t.Fatalf("not idle: running %d waiting %d", e.Running(), e.Waiting())
			}
			for id, n := range want {
				if got[id] != n {
					t.Errorf("seq %d: %d tokens, want %d", id, got[id], n)
				}
			}
			if e.Preemptions() == 0 {
				t.Error("workload too light: no preemptions exercised")
			}
			t.Logf("%d sequences, %d aborted, %d steps, %d preemptions, %d recomputed tokens", id, aborted, e.Steps(), e.Preemptions(), e.RecomputedTokens())
		})
	}
}
