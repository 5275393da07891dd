package kvblock

import "testing"

func TestChainSharesExactlyTheCommonPrefix(t *testing.T) {
	a := make([]uint32, 50)
	b := make([]uint32, 50)
	for i := range a {
		a[i], b[i] = uint32(i), uint32(i)
	}
	b[40] = 999 // differs in the third block (tokens 32..47)
	ha := Chain(nil, 0, a, 16)
	hb := Chain(nil, 0, b, 16)
	if len(ha) != 3 || len(hb) != 3 {
		t.Fatalf("blocks: %d, %d; want 3 full blocks of 16 in 50 tokens", len(ha), len(hb))
	}
	if ha[0] != hb[0] || ha[1] != hb[1] {
		t.Errorf("first two blocks differ although their tokens are equal")
	}
	if ha[2] == hb[2] {
		t.Errorf("third block equal although token 40 differs")
	}
}

func TestChainDependsOnParent(t *testing.T) {
	blk := []uint32{1, 2, 3, 4}
	if Extend(0, blk) == Extend(Extend(0, blk), blk) {
		t.Error("the same tokens after different parents hash equal")
	}
	if Extend(0, []uint32{0x0100}) == Extend(0, []uint32{0x01}) {
		t.Error("token ids differing in the second byte hash equal")
	}
}

func TestChainAppendsAndContinues(t *testing.T) {
	toks := make([]uint32, 64)
	for i := range toks {
		toks[i] = uint32(i * 7)
	}
	whole := Chain(nil, 0, toks, 16)
	part := Chain(nil, 0, toks[:32], 16)
	rest := Chain(part, part[len(part)-1], toks[32:], 16)
	if len(rest) != len(whole) {
		t.Fatalf("continued chain has %d blocks, want %d", len(rest), len(whole))
	}
	for i := range whole {
		if whole[i] != rest[i] {
			t.Errorf("block %d: continued chain differs", i)
		}
	}
	if got := Chain(nil, 0, toks[:10], 0); len(got) != 0 {
		t.Errorf("10 tokens at the default block size gave %d blocks", len(got))
	}
}

func TestCacheable(t *testing.T) {
	for _, c := range []struct{ prompt, bs, want int }{
		{0, 16, 0}, {1, 16, 0}, {16, 16, 0}, {17, 16, 1}, {32, 16, 1}, {33, 16, 2}, {1024, 512, 1}, {1025, 512, 2}, {20, 0, 1},
	} {
		if got := Cacheable(c.prompt, c.bs); got != c.want {
			t.Errorf("Cacheable(%d, %d) = %d, want %d", c.prompt, c.bs, got, c.want)
		}
	}
}

func FuzzChain(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9}, 2)
	f.Fuzz(func(t *testing.T, raw []byte, bs int) {
		bs = bs%64 + 1
		if bs < 1 {
			bs = -bs + 1
		}
		toks := make([]uint32, len(raw))
		for i, c := range raw {
			toks[i] = uint32(c)
		}
		h := Chain(nil, 0, toks, bs)
		if len(h) != len(toks)/bs {
			t.Fatalf("%d tokens, block %d: %d hashes", len(toks), bs, len(h))
		}
		for _, x := range h {
			if x == 0 {
				t.Fatal("zero hash")
			}
		}
	})
}

func BenchmarkChain(b *testing.B) {
	toks := make([]uint32, 8192)
	for i := range toks {
		toks[i] = uint32(i)
	}
	dst := make([]Hash, 0, 512)
	b.SetBytes(int64(4 * len(toks)))
	for b.Loop() {
		dst = Chain(dst[:0], 0, toks, 16)
	}
}
