package stats

import (
	"math/rand/v2"
	"testing"

	"github.com/llmesh/llmesh/bench/result"
)

// TestPeakConcurrencyIsTheCount compares the sweep's peak with the most
// requests in flight just after any send instant (sent by then, less ended
// by then), counted one by one, over random runs with many equal instants:
// a request that ends as another starts is not concurrent with it.
func TestPeakConcurrencyIsTheCount(t *testing.T) {
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 9))
		n := 1 + rng.IntN(60)
		recs := make([]*result.Record, n)
		for i := range recs {
			sent := int64(rng.IntN(20)) * 1e8
			recs[i] = &result.Record{SentNS: sent, DoneNS: sent + int64(rng.IntN(10))*1e8, Status: result.StatusOK}
		}
		want := 0
		for _, a := range recs {
			in := 0
			for _, b := range recs {
				if b.SentNS <= a.SentNS {
					in++
				}
				if b.DoneNS <= a.SentNS {
					in--
				}
			}
			want = max(want, in)
		}
		var rs rows
		for _, r := range recs {
			rs.add(r, 0)
		}
		_, got, _ := timeline(&rs, []string{""}, 0, 3e9)
		if got != want {
			t.Fatalf("seed %d: peak %d, want %d", seed, got, want)
		}
	}
}
