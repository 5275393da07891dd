package sim

import (
	"reflect"
	"testing"
	"time"

	"github.com/llmesh/llmesh/kvblock"
)

// TestFreeStackIsTheQueue: an engine whose pool keeps its anonymous free
// blocks on a stack (lifo) steps exactly as one that keeps them in the LRU
// queue from the start, event for event and step duration for step
// duration, through a random workload with preemptions and aborts; and
// sequences with block hashes arriving midway move the stack into the
// queue without a difference either. The queue engine keeps no spare
// sequences (Add allocates every one), so reusing released sequences and
// their block tables is checked the same way.
func TestFreeStackIsTheQueue(t *testing.T) {
	for _, pol := range []Policy{FCFS, Priority} {
		t.Run(pol.String(), func(t *testing.T) {
			cfg := Config{Policy: pol, MaxNumSeqs: 24, MaxNumBatchedTokens: 700, KVCacheTokens: 4096, MaxModelLen: 2048}
			a, b := newTestEngine(t, cfg), newTestEngine(t, cfg)
			b.pool.toQueue()
			b.spareN = 0
			if !a.pool.lifo || b.pool.lifo {
				t.Fatal("want a on the stack, b on the queue")
			}
			rng := uint64(777)
			next := func(n int) int {
				rng ^= rng << 13
				rng ^= rng >> 7
				rng ^= rng << 17
				return int(rng % uint64(n))
			}
			now := time.Unix(0, 0)
			id := uint64(0)
			for step := 0; step < 20000 && (id < 400 || !a.Idle()); step++ {
				for k := next(3); k > 0 && id < 400; k-- {
					id++
					s := SeqSpec{ID: id, PromptTokens: 1 + next(1500), MaxTokens: 1 + next(300), Priority: next(4)}
					if id > 300 { // shared prefixes from here on
						s.Blocks = make([]kvblock.Hash, s.PromptTokens/BlockSize)
						for i := range s.Blocks {
							s.Blocks[i] = kvblock.Hash(1 + i + 1000*next(3))
						}
					}
					if errA, errB := a.Add(s), b.Add(s); errA != nil || errB != nil {
						t.Fatal(errA, errB)
					}
				}
				if next(50) == 0 && id > 0 {
					victim := 1 + uint64(next(int(id)))
					if a.Abort(victim) != b.Abort(victim) {
						t.Fatalf("abort %d differs", victim)
					}
				}
				ra, rb := a.Step(now), b.Step(now)
				if !reflect.DeepEqual(ra, rb) {
					t.Fatalf("step %d differs:\n%+v\n%+v", step, ra, rb)
				}
				if a.KVUsage() != b.KVUsage() {
					t.Fatalf("step %d: KV usage %v against %v", step, a.KVUsage(), b.KVUsage())
				}
				checkInvariants(t, a)
				checkInvariants(t, b)
				if ra.Duration > 0 {
					now = ra.End()
				} else {
					now = now.Add(time.Millisecond)
				}
			}
			if len(a.spare) == 0 || len(b.spare) != 0 {
				t.Fatalf("%d and %d spare sequences: want some and none", len(a.spare), len(b.spare))
			}
			if !a.Idle() || a.pool.lifo || a.Preemptions() == 0 || a.PrefixHits() == 0 {
				t.Fatalf("idle %v, lifo %v, %d preemptions, %d prefix hits: the workload missed a case", a.Idle(), a.pool.lifo, a.Preemptions(), a.PrefixHits())
			}
			if a.PrefixHits() != b.PrefixHits() || a.RecomputedTokens() != b.RecomputedTokens() {
				t.Fatalf("hits %d/%d, recomputed %d/%d", a.PrefixHits(), b.PrefixHits(), a.RecomputedTokens(), b.RecomputedTokens())
			}
		})
	}
}
