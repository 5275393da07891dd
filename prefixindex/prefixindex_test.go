package prefixindex

import (
	"encoding/binary"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/llmesh/llmesh/kvblock"
)

// chain is a prompt's block hashes: n blocks of distinct tokens after the
// given shared leading tokens seed.
func chain(seed uint32, n int) []kvblock.Hash {
	toks := make([]uint32, n*kvblock.DefaultBlockSize)
	for i := range toks {
		toks[i] = seed*1000 + uint32(i)
	}
	return kvblock.Chain(nil, 0, toks, kvblock.DefaultBlockSize)
}

func TestMatchLeadingBlocks(t *testing.T) {
	x, err := New([]int{100, 100, 100})
	if err != nil {
		t.Fatal(err)
	}
	a := chain(1, 8)
	x.Record(0, a[:8])
	x.Record(1, a[:3])
	// Endpoint 2 holds a later block but not the first: a prefix cache
	// cannot use it.
	x.Record(2, a[4:8])

	got := x.Match(nil, a)
	if diff := cmp.Diff([]int{8, 3, 0}, got); diff != "" {
		t.Errorf("Match (-want +got):\n%s", diff)
	}
	// Another prompt sharing the first 5 blocks, then diverging.
	b := append(slices.Clone(a[:5]), chain(2, 4)...)
	if diff := cmp.Diff([]int{5, 3, 0}, x.Match(got, b)); diff != "" {
		t.Errorf("Match of a diverging prompt (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]int{0, 0, 0}, x.Match(nil, nil)); diff != "" {
		t.Errorf("Match of no blocks (-want +got):\n%s", diff)
	}
}

func TestEvictsLeastRecentlyUsedTailFirst(t *testing.T) {
	x, _ := New([]int{6})
	a, b := chain(1, 4), chain(2, 4)
	x.Record(0, a)
	x.Record(0, b) // 8 blocks into 6: a's last two go
	if got := x.Len(0); got != 6 {
		t.Fatalf("Len = %d, want 6", got)
	}
	if got := x.Match(nil, a)[0]; got != 2 {
		t.Errorf("a matches %d blocks, want its first 2 (the tail is evicted first)", got)
	}
	if got := x.Match(nil, b)[0]; got != 4 {
		t.Errorf("b matches %d blocks, want 4", got)
	}
	// Using a again makes it recent; b's tail goes next.
	x.Record(0, a[:2])
	x.Record(0, chain(3, 2))
	if got := x.Match(nil, a)[0]; got != 2 {
		t.Errorf("after reuse a matches %d, want 2", got)
	}
	if got := x.Match(nil, b)[0]; got != 2 {
		t.Errorf("after reuse b matches %d, want 2", got)
	}
}

func TestLongPromptKeepsItsHead(t *testing.T) {
	x, _ := New([]int{3, 0})
	a := chain(1, 10)
	x.Record(0, a)
	x.Record(1, a)
	if diff := cmp.Diff([]int{3, 0}, x.Match(nil, a)); diff != "" {
		t.Errorf("Match (-want +got):\n%s", diff)
	}
	x.Record(5, a)  // out of range: ignored
	x.Record(-1, a) // likewise
}

func TestNewRejectsBadCapacity(t *testing.T) {
	for _, c := range []int{-1, MaxCapacity + 1} {
		_, err := New([]int{10, c})
		if err == nil || !strings.Contains(err.Error(), "capacities[1]") {
			t.Errorf("New(capacity %d) = %v, want an error naming capacities[1]", c, err)
		}
	}
}

// model is the reference: per endpoint a slice, most recent first.
type model [][]kvblock.Hash

func (m model) record(ep, capacity int, blocks []kvblock.Hash) {
	if len(blocks) > capacity {
		blocks = blocks[:capacity]
	}
	for i := len(blocks) - 1; i >= 0; i-- {
		l := m[ep]
		if j := slices.Index(l, blocks[i]); j >= 0 {
			l = slices.Delete(l, j, j+1)
		} else if len(l) == capacity {
			l = l[:len(l)-1]
		}
		m[ep] = slices.Insert(l, 0, blocks[i])
	}
}

func (m model) match(blocks []kvblock.Hash) []int {
	out := make([]int, len(m))
	for ep, l := range m {
		for _, h := range blocks {
			if !slices.Contains(l, h) {
				break
			}
			out[ep]++
		}
	}
	return out
}

// FuzzIndex drives an index and the reference model with the same
// operations: every match agrees, no endpoint holds more than its capacity,
// and the index holds exactly what the endpoints' counts say.
func FuzzIndex(f *testing.F) {
	f.Add([]byte{3, 4, 0, 1, 2, 3, 1, 1, 2, 3, 4, 5})
	f.Add([]byte{1, 1, 0, 0, 0, 0, 0})
	f.Add([]byte{4, 2, 9, 1, 1, 1, 1, 1, 1, 1, 1, 200, 3, 3, 7})
	f.Add([]byte{0})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 2 {
			return
		}
		n := int(data[0]%5) + 1
		capacity := int(data[1] % 9)
		data = data[2:]
		caps := make([]int, n)
		for i := range caps {
			caps[i] = (capacity + i) % 9
		}
		x, err := New(caps)
		if err != nil {
			t.Fatal(err)
		}
		m := make(model, n)
		var dst []int
		for len(data) >= 2 {
			op, l := data[0], int(data[1]%12)
			data = data[2:]
			l = min(l, len(data))
			// Few distinct hashes so that sets overlap; never 0.
			blocks := make([]kvblock.Hash, l)
			for i, c := range data[:l] {
				blocks[i] = kvblock.Hash(binary.LittleEndian.Uint16([]byte{c % 7, 1}))
			}
			data = data[l:]
			ep := int(op>>1) % n
			if op&1 == 0 {
				x.Record(ep, blocks)
				m.record(ep, caps[ep], blocks)
			} else {
				dst = x.Match(dst, blocks)
				if diff := cmp.Diff(m.match(blocks), dst); diff != "" {
					t.Fatalf("Match(%v) (-model +index):\n%s", blocks, diff)
				}
			}
			total := 0
			for i := range n {
				if x.Len(i) > caps[i] || x.Len(i) != len(m[i]) {
					t.Fatalf("endpoint %d holds %d, model %d, capacity %d", i, x.Len(i), len(m[i]), caps[i])
				}
				total += x.Len(i)
			}
			if held := x.held(t); held != total {
				t.Fatalf("the hash chains hold %d entries, endpoints %d", held, total)
			}
		}
	})
}

// held counts the entries on the hash chains, checking that each is on
// its own hash's chain and that no endpoint appears twice in one.
func (x *Index) held(t *testing.T) int {
	n := 0
	for h, s := range x.heads {
		seen := map[int32]bool{}
		for ; s >= 0; s = x.entries[s].same {
			e := x.entries[s]
			if e.h != h || seen[e.ep] {
				t.Fatalf("chain of %x: entry %+v", h, e)
			}
			seen[e.ep] = true
			n++
		}
	}
	return n
}

func BenchmarkMatch(b *testing.B) {
	caps := make([]int, 8)
	for i := range caps {
		caps[i] = 50000
	}
	x, _ := New(caps)
	prompts := make([][]kvblock.Hash, 64)
	for i := range prompts {
		prompts[i] = chain(uint32(i), 200)
		x.Record(i%8, prompts[i])
	}
	var dst []int
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		dst = x.Match(dst, prompts[i%len(prompts)])
	}
}
