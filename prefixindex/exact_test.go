package prefixindex

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/llmesh/llmesh/kvblock"
)

func TestExactMatchesLeadingRunPerEndpoint(t *testing.T) {
	x, err := NewExact(3, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := []kvblock.Hash{11, 12, 13, 14}
	x.Store(0, b[:2])
	x.Store(1, b)
	x.Store(2, b[1:]) // no first block: no match
	x.Store(5, b)     // out of range: ignored
	if got := x.Match(nil, b); !cmp.Equal(got, []int{2, 4, 0}) {
		t.Fatalf("match %v", got)
	}
	x.Remove(1, b[2:3])
	x.Remove(0, []kvblock.Hash{99})
	if got := x.Match(nil, b); !cmp.Equal(got, []int{2, 2, 0}) {
		t.Fatalf("after removal: %v", got)
	}
	x.Record(0, b) // a no-op in the exact index
	x.Clear(1)
	if got := x.Match(nil, b); !cmp.Equal(got, []int{2, 0, 0}) || x.Len(1) != 0 || x.Len(2) != 3 {
		t.Fatalf("after clear: %v, lens %d %d", got, x.Len(1), x.Len(2))
	}
	x.Store(0, b[:2]) // already held: no double count
	if x.Len(0) != 2 {
		t.Errorf("len %d after storing held blocks again", x.Len(0))
	}
}

func TestExactLimit(t *testing.T) {
	x, _ := NewExact(1, 2)
	x.Store(0, []kvblock.Hash{1, 2, 3})
	if x.Len(0) != 2 {
		t.Errorf("holds %d blocks, limit 2", x.Len(0))
	}
	if _, err := NewExact(-1, 0); err == nil {
		t.Error("negative endpoints accepted")
	}
}
