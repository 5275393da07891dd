package scheduler

import (
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/llmesh/llmesh/kvblock"
)

// TestTicketTableIsAMap puts tickets in sequence and removes them in
// random order, some soon, some after many newer ones (which moves them out
// of the slots), and requires every lookup, of live, removed and never
// issued tickets, to answer as a map does.
func TestTicketTableIsAMap(t *testing.T) {
	for seed := range uint64(8) {
		rng := rand.New(rand.NewPCG(seed, 3))
		var tab ticketTable
		want := map[Ticket]*entry{}
		var live []Ticket
		next := Ticket(0)
		moved, peak := false, 0
		for i := range 20000 {
			if rng.IntN(100) < 52 || len(live) == 0 {
				next++
				e := &entry{ticket: next}
				tab.put(e)
				want[next] = e
				live = append(live, next)
			} else {
				// Mostly the newest, now and then any: a few live long.
				j := len(live) - 1 - rng.IntN(min(len(live), 8))
				if rng.IntN(10) == 0 {
					j = rng.IntN(len(live))
				}
				k := live[j]
				live[j] = live[len(live)-1]
				live = live[:len(live)-1]
				tab.remove(k)
				delete(want, k)
			}
			moved, peak = moved || len(tab.old) > 0, max(peak, len(want))
			for range 4 {
				k := Ticket(rng.Int64N(int64(next) + 3))
				if got := tab.get(k); got != want[k] {
					t.Fatalf("seed %d op %d: get(%d) = %v, want %v", seed, i, k, got, want[k])
				}
			}
			if tab.live+len(tab.old) != len(want) {
				t.Fatalf("seed %d op %d: %d in slots + %d moved, %d live", seed, i, tab.live, len(tab.old), len(want))
			}
		}
		for _, k := range live {
			if tab.get(k) != want[k] {
				t.Fatalf("seed %d: live ticket %d lost", seed, k)
			}
		}
		if !moved {
			t.Errorf("seed %d: no ticket ever moved out of the slots", seed)
		}
		if len(tab.slots) > max(ticketTableMin, 4*peak) {
			t.Errorf("seed %d: %d slots for at most %d live", seed, len(tab.slots), peak)
		}
	}
}

// A fleet far past saturation holds a million waiting requests in one
// machine, so an entry keeps only what the machine reads after arrival.
func TestEntryIsSmall(t *testing.T) {
	t.Logf("entry %d B", unsafe.Sizeof(entry{}))
	if n := unsafe.Sizeof(entry{}); n > 288 {
		t.Errorf("entry is %d bytes, want at most 288 (one size class of the allocator)", n)
	}
}

func TestEntryKeepsTheRequestsHints(t *testing.T) {
	blocks := []kvblock.Hash{1, 2}
	k := keepOf(Request{ID: "a", PromptTokens: 3, MaxTokens: 4, Affinity: "s", Avoid: "e1", Pin: "e2", Blocks: blocks})
	if k.ID != "a" || k.PromptTokens != 3 || k.MaxTokens != 4 || k.affinity() != "s" || k.avoid() != "e1" || k.pin() != "e2" || len(k.blocks()) != 2 {
		t.Fatalf("keepOf = %+v", k)
	}
	k.dropBlocks()
	if k.blocks() != nil {
		t.Fatal("dropBlocks kept the blocks")
	}
	plain := keepOf(Request{ID: "b", PromptTokens: 5})
	if plain.hints != nil || plain.pin() != "" || plain.avoid() != "" || plain.affinity() != "" || plain.blocks() != nil {
		t.Fatalf("a request without hints got %+v", plain.hints)
	}
	plain.dropBlocks()
}
