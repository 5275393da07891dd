package sim

import (
	"reflect"
	"testing"
	"time"

	"github.com/llmesh/llmesh/kvblock"
)

// promptOf is a prompt of n tokens from family f: two prompts of one family
// share every token up to the shorter one's end.
func promptOf(f uint32, n int) []kvblock.Hash {
	toks := make([]uint32, n)
	for i := range toks {
		toks[i] = f*7919 + uint32(i)
	}
	return kvblock.Chain(nil, 0, toks, BlockSize)
}

// firstToken adds s and steps until its first token; it returns the time
// from start to that token and the step end.
func firstToken(t *testing.T, e *Engine, s SeqSpec, start time.Time) (time.Duration, time.Time) {
	t.Helper()
	if err := e.Add(s); err != nil {
		t.Fatal(err)
	}
	now := start
	for i := 0; i < 10000; i++ {
		r := e.Step(now)
		now = r.End()
		for _, ev := range r.Events {
			if ev.ID == s.ID && ev.Flags.Has(EvFirstToken) {
				return now.Sub(start), now
			}
		}
	}
	t.Fatalf("seq %d: no first token", s.ID)
	return 0, now
}

func drain(t *testing.T, e *Engine, now time.Time) time.Time {
	t.Helper()
	_, end := run(t, e, now, 100000)
	checkInvariants(t, e)
	return end
}

// TestPrefixRepeatHits: the second identical 4,096-token prompt finds all
// its cacheable blocks (all but the one holding its last token) and its
// TTFT is shorter; with caching off it is not.
func TestPrefixRepeatHits(t *testing.T) {
	const prompt = 4096
	blocks := promptOf(1, prompt)
	ttfts := map[bool][2]time.Duration{}
	for _, off := range []bool{false, true} {
		e := newTestEngine(t, Config{DisablePrefixCaching: off})
		var got [2]time.Duration
		now := time.Unix(0, 0)
		for i := range got {
			got[i], now = firstToken(t, e, SeqSpec{ID: uint64(i + 1), PromptTokens: prompt, MaxTokens: 1, Blocks: blocks}, now)
			now = drain(t, e, now)
		}
		ttfts[off] = got
		wantHits := int64(0)
		wantQueries := int64(0)
		if !off {
			wantHits = int64(kvblock.Cacheable(prompt, BlockSize) * BlockSize)
			wantQueries = 2 * prompt
		}
		if e.PrefixHits() != wantHits || e.PrefixQueries() != wantQueries {
			t.Errorf("caching off=%v: hits %d of %d queries, want %d of %d", off, e.PrefixHits(), e.PrefixQueries(), wantHits, wantQueries)
		}
		if e.KVUsage() != 0 {
			t.Errorf("idle engine's KV usage %v, want 0 (cached free blocks count as free)", e.KVUsage())
		}
	}
	on, off := ttfts[false], ttfts[true]
	t.Logf("TTFT of a repeated %d-token prompt (%s): first %v, repeat with prefix caching %v, repeat without %v", prompt, DefaultProfile, on[0], on[1], off[1])
	if on[1] >= on[0]/4 {
		t.Errorf("cached repeat TTFT %v, want well under the first %v", on[1], on[0])
	}
	if off[1] != off[0] || on[0] != off[0] {
		t.Errorf("uncached TTFTs %v, first cached %v: want all equal", off, on[0])
	}
}

// TestPrefixLastTokenComputed: a prompt of exactly 4 blocks hits 3 of them
// and computes the 16 tokens of the last.
func TestPrefixLastTokenComputed(t *testing.T) {
	e := newTestEngine(t, Config{})
	blocks := promptOf(2, 64)
	now := time.Unix(0, 0)
	_, now = firstToken(t, e, SeqSpec{ID: 1, PromptTokens: 64, MaxTokens: 1, Blocks: blocks}, now)
	now = drain(t, e, now)
	if err := e.Add(SeqSpec{ID: 2, PromptTokens: 64, MaxTokens: 1, Blocks: blocks}); err != nil {
		t.Fatal(err)
	}
	r := e.Step(now)
	if len(r.Events) != 1 || r.Events[0].Scheduled != 16 || !r.Events[0].Flags.Has(EvFirstToken) {
		t.Fatalf("events %+v, want one of 16 tokens with the first token", r.Events)
	}
	if r.Shape.PrefillTokens != 16 || r.Shape.PrefillAttention != 16*16/2 || r.Shape.PrefillCrossAttention != 16*48 {
		t.Errorf("shape %+v, want 16 prefill tokens after 48 cached", r.Shape)
	}
	if e.PrefixHits() != 48 {
		t.Errorf("hits %d, want 48", e.PrefixHits())
	}
}

// TestPrefixEvictsLRU: in a 16-block cache, freed blocks are evicted least
// recently freed first and, within a sequence, tail first.
func TestPrefixEvictsLRU(t *testing.T) {
	e := newTestEngine(t, Config{KVCacheTokens: 16 * BlockSize})
	a, b := promptOf(3, 80), promptOf(4, 80)
	now := time.Unix(0, 0)
	hits := func(id uint64, blocks []kvblock.Hash, prompt int) int64 {
		before := e.PrefixHits()
		_, now = firstToken(t, e, SeqSpec{ID: id, PromptTokens: prompt, MaxTokens: 1, Blocks: blocks}, now)
		now = drain(t, e, now)
		return e.PrefixHits() - before
	}
	hits(1, a, 80) // 5 blocks, freed tail first: queue 5..15, A4..A0
	hits(2, b, 80) // takes 5..9: queue 10..15, A4..A0, B4..B0
	// 8 anonymous blocks take 10..15 and evict A's tail blocks A4, A3.
	hits(3, nil, 128)
	// B's four cacheable blocks survive; its one new block evicts A2.
	if got := hits(4, b, 80); got != 64 {
		t.Errorf("B again hit %d tokens, want 64", got)
	}
	if got := hits(5, a, 80); got != 32 {
		t.Errorf("A again hit %d tokens, want 32 (A0, A1 survive)", got)
	}
}

// TestPrefixSharedRefCount: a block hit while its first holder runs is
// shared, and stays cached after both end.
func TestPrefixSharedRefCount(t *testing.T) {
	e := newTestEngine(t, Config{})
	blocks := promptOf(5, 64)
	now := time.Unix(0, 0)
	_, now = firstToken(t, e, SeqSpec{ID: 1, PromptTokens: 64, MaxTokens: 1000, Blocks: blocks}, now)
	_, now = firstToken(t, e, SeqSpec{ID: 2, PromptTokens: 64, MaxTokens: 1000, Blocks: blocks}, now)
	a, b := e.seqs[1], e.seqs[2]
	if a.table[0] != b.table[0] || e.pool.ref[a.table[0]] != 2 || a.table[3] == b.table[3] {
		t.Fatalf("tables %v and %v, ref of first %d: want the first 3 blocks shared", a.table[:4], b.table[:4], e.pool.ref[a.table[0]])
	}
	first := a.table[0]
	checkInvariants(t, e)
	e.Abort(1)
	if e.pool.ref[first] != 1 || e.pool.prev[first] != -1 {
		t.Errorf("after one abort: ref %d, want 1 and not free", e.pool.ref[first])
	}
	e.Abort(2)
	if e.pool.ref[first] != 0 || e.pool.cached[blocks[0]] != first || e.KVUsage() != 0 {
		t.Errorf("after both: ref %d, cached %v, usage %v", e.pool.ref[first], e.pool.cached[blocks[0]] == first, e.KVUsage())
	}
	checkInvariants(t, e)
	_ = now
}

// TestPrefixPreemptedResumeHits: a preempted sequence finds its own prompt
// blocks when it resumes, so it recomputes only the rest.
func TestPrefixPreemptedResumeHits(t *testing.T) {
	recomputed := map[bool]int64{}
	for _, off := range []bool{false, true} {
		e := newTestEngine(t, Config{KVCacheTokens: 16 * BlockSize, DisablePrefixCaching: off})
		for i, p := range []int{120, 112} {
			if err := e.Add(SeqSpec{ID: uint64(i + 1), PromptTokens: p, MaxTokens: 20, Blocks: promptOf(uint32(10+i), p)}); err != nil {
				t.Fatal(err)
			}
		}
		drain(t, e, time.Unix(0, 0))
		if e.Preemptions() != 1 {
			t.Fatalf("off=%v: %d preemptions, want 1", off, e.Preemptions())
		}
		recomputed[off] = e.RecomputedTokens()
	}
	// The second sequence's 7 prompt blocks (112 tokens) stay cached.
	if recomputed[false] != recomputed[true]-112 {
		t.Errorf("recomputed with caching %d, without %d: want 112 fewer", recomputed[false], recomputed[true])
	}
}

// TestPrefixDisabledIsToday: with caching off, sequences with Blocks run
// exactly as sequences without them do with caching on.
func TestPrefixDisabledIsToday(t *testing.T) {
	type out struct {
		evs map[uint64][]Event
		end time.Time
		kv  int64
	}
	runAll := func(off, withBlocks bool) out {
		e := newTestEngine(t, Config{KVCacheTokens: 64 * BlockSize, MaxNumBatchedTokens: 256, DisablePrefixCaching: off})
		for i := range 12 {
			p := 100 + 37*i%300
			s := SeqSpec{ID: uint64(i), PromptTokens: p, MaxTokens: 30 + i, Priority: i % 3}
			if withBlocks {
				s.Blocks = promptOf(uint32(i%2), p)
			}
			if err := e.Add(s); err != nil {
				t.Fatal(err)
			}
		}
		evs, end := run(t, e, time.Unix(0, 0), 100000)
		return out{evs, end, e.RecomputedTokens()}
	}
	want := runAll(false, false)
	if got := runAll(true, true); !reflect.DeepEqual(want, got) {
		t.Errorf("caching off with blocks differs from no blocks: end %v vs %v", got.end, want.end)
	}
	if got := runAll(false, true); got.end.Equal(want.end) {
		t.Errorf("caching on with shared prefixes took as long as without: %v", got.end)
	}
}

// FuzzPrefixCache drives an engine with a tiny cache through random adds,
// steps and aborts of prompts from a few families, checking the pool's
// invariants after every operation.
func FuzzPrefixCache(f *testing.F) {
	f.Add([]byte{0, 1, 2, 0, 1, 2, 3, 1, 1, 1, 0, 5, 9, 1, 1, 1})
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 2, 3, 2, 5, 1, 1})
	f.Add([]byte{4, 200, 4, 201, 4, 202, 1, 1, 6, 1, 1, 1, 1})
	p, err := LookupProfile(DefaultProfile)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, ops []byte) {
		e, err := NewEngine(p, Config{KVCacheTokens: 24 * BlockSize, MaxNumBatchedTokens: 96, MaxNumSeqs: 4, Policy: Policy(len(ops) % 2)})
		if err != nil {
			t.Fatal(err)
		}
		now := time.Unix(0, 0)
		next := uint64(0)
		for i := 0; i < len(ops); i++ {
			op := ops[i]
			arg := byte(0)
			if i+1 < len(ops) {
				arg = ops[i+1]
			}
			switch op % 4 {
			case 0, 3: // add
				i++
				prompt := 1 + int(arg)%200
				s := SeqSpec{ID: next, PromptTokens: prompt, MaxTokens: 1 + int(arg/7)%40, Priority: int(arg % 3)}
				if arg%5 != 0 {
					s.Blocks = promptOf(uint32(arg%3), prompt+s.MaxTokens)
				}
				next++
				if err := e.Add(s); err != nil {
					t.Fatal(err)
				}
			case 1:
				now = e.Step(now).End()
			case 2:
				i++
				if next > 0 {
					e.Abort(uint64(arg) % next)
				}
			}
			if err := e.checkBlocks(); err != nil {
				t.Fatalf("op %d: %v", i, err)
			}
		}
		for n := 0; !e.Idle(); n++ {
			if n > 100000 {
				t.Fatal("engine does not drain")
			}
			now = e.Step(now).End()
			if err := e.checkBlocks(); err != nil {
				t.Fatalf("drain: %v", err)
			}
		}
		if e.KVUsage() != 0 {
			t.Fatalf("idle engine's usage %v", e.KVUsage())
		}
	})
}
