package kvblock

import (
	"bytes"
	"testing"
)

func textBlocks(blockBytes, maxBlocks int, pieces ...[]byte) []Hash {
	c := TextChain{BlockBytes: blockBytes, MaxBlocks: maxBlocks}
	for _, p := range pieces {
		c.Write(p)
	}
	return c.Blocks
}

func TestTextChainSharesExactlyEqualPrefixes(t *testing.T) {
	a := bytes.Repeat([]byte("abcdefgh"), 40) // 320 bytes
	b := append(append([]byte(nil), a[:200]...), bytes.Repeat([]byte("z"), 120)...)
	ha, hb := textBlocks(64, 100, a), textBlocks(64, 100, b)
	if len(ha) != 5 || len(hb) != 5 {
		t.Fatalf("%d and %d blocks of 320 bytes in 64, want 5", len(ha), len(hb))
	}
	for i := range ha {
		// Bytes 0..191 agree (3 blocks); block 3 (192..255) differs from byte 200 on.
		if (ha[i] == hb[i]) != (i < 3) {
			t.Errorf("block %d: equal=%v", i, ha[i] == hb[i])
		}
	}
	// Pieces do not matter, only the bytes.
	split := textBlocks(64, 100, a[:1], a[1:100], a[100:101], a[101:])
	for i := range ha {
		if split[i] != ha[i] {
			t.Fatalf("block %d differs when written in pieces", i)
		}
	}
	if got := textBlocks(64, 2, a); len(got) != 2 || got[1] != ha[1] {
		t.Errorf("MaxBlocks 2: %d blocks", len(got))
	}
	if got := textBlocks(64, 0, a); len(got) != 0 {
		t.Errorf("MaxBlocks 0: %d blocks", len(got))
	}
}

func TestTextChainAllocatesOnlyItsHashes(t *testing.T) {
	c := TextChain{BlockBytes: 64, MaxBlocks: 64, Blocks: make([]Hash, 0, 64)}
	text := bytes.Repeat([]byte("x"), 8192)
	if n := testing.AllocsPerRun(100, func() {
		c.Reset()
		c.Write(text)
	}); n != 0 {
		t.Errorf("%v allocations per prompt", n)
	}
}

func FuzzTextChain(f *testing.F) {
	f.Add([]byte("hello world"), 3, uint8(4))
	f.Add([]byte{}, 1, uint8(0))
	f.Fuzz(func(t *testing.T, text []byte, blockBytes int, cut uint8) {
		if blockBytes < 1 || blockBytes > 1024 {
			return
		}
		whole := textBlocks(blockBytes, 1<<20, text)
		if len(whole) != len(text)/blockBytes {
			t.Fatalf("%d blocks for %d bytes in %d", len(whole), len(text), blockBytes)
		}
		k := min(int(cut), len(text))
		parts := textBlocks(blockBytes, 1<<20, text[:k], text[k:])
		for i := range whole {
			if whole[i] != parts[i] || whole[i] == 0 {
				t.Fatalf("block %d differs in pieces or is zero", i)
			}
		}
	})
}
