package sim

import (
	"slices"
	"strings"
	"testing"
)

func TestVocabularyRoundTrips(t *testing.T) {
	seen := map[string]bool{}
	for id := uint32(0); id < VocabSize; id++ {
		w := Word(id)
		if seen[w] {
			t.Fatalf("word %q twice", w)
		}
		seen[w] = true
		if got := TokenID(w); got != id {
			t.Fatalf("TokenID(Word(%d)) = %d", id, got)
		}
	}
	ids := []uint32{0, 1, 31, 32, 1023, 1024, VocabSize - 1}
	if got := Tokenize(Detokenize(ids)); !slices.Equal(got, ids) {
		t.Errorf("Tokenize(Detokenize(%v)) = %v", ids, got)
	}
}

func TestTokenizeRule(t *testing.T) {
	ids := Tokenize("  hello\tworld\n bakabi  ")
	if len(ids) != 3 || ids[2] != TokenID("bakabi") || ids[0] != TokenID("hello") {
		t.Errorf("Tokenize = %v", ids)
	}
	if CountTokens("  hello\tworld\n bakabi  ") != 3 || CountTokens("") != 0 {
		t.Error("CountTokens disagrees with Tokenize")
	}
	for _, id := range ids {
		if id >= VocabSize {
			t.Errorf("id %d outside the vocabulary", id)
		}
	}
}

func TestGeneratorContinuation(t *testing.T) {
	for _, prompt := range [][]uint32{{5}, {1, 2}, {9, 8, 7, 6, 5, 4, 3}} {
		g := NewGenerator(42, prompt)
		var out []uint32
		for range 20 {
			out = append(out, g.Next())
		}
		for cut := 0; cut < 20; cut++ {
			ctx := append(slices.Clone(prompt), out[:cut]...)
			g2 := NewGenerator(42, ctx)
			for i := cut; i < 20; i++ {
				if got := g2.Next(); got != out[i] {
					t.Fatalf("prompt %v cut %d: token %d = %d, want %d", prompt, cut, i, got, out[i])
				}
			}
		}
	}
	a, b := NewGenerator(1, []uint32{1}), NewGenerator(2, []uint32{1})
	same := true
	for i := 0; i < 3; i++ { // each Next advances its generator
		same = same && a.Next() == b.Next()
	}
	if same {
		t.Error("seed does not change the output")
	}
}

func FuzzTokenize(f *testing.F) {
	f.Add("hello world")
	f.Add(" bakabi\u00a0soloso\u2003x ")
	f.Add(strings.Repeat("a ", 100))
	f.Fuzz(func(t *testing.T, s string) {
		ids := Tokenize(s)
		if len(ids) != CountTokens(s) {
			t.Fatalf("Tokenize gives %d ids, CountTokens %d", len(ids), CountTokens(s))
		}
		if got := Tokenize(Detokenize(ids)); !slices.Equal(got, ids) {
			t.Fatalf("round trip of %q: %v != %v", s, got, ids)
		}
	})
}
