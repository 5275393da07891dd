package simulate

import (
	"math/rand/v2"
	"testing"

	"github.com/llmesh/llmesh/scheduler"
)

// TestTicketIndexIsAMap drives the index and a map through the same random
// puts (mostly the next ticket, sometimes one behind or far ahead), gets
// and removes, and requires the same answers.
func TestTicketIndexIsAMap(t *testing.T) {
	for seed := range uint64(4) {
		rng := rand.New(rand.NewPCG(seed, 3))
		var x ticketIndex
		want := map[scheduler.Ticket]*vreq{}
		reqs := make([]vreq, 64)
		next := scheduler.Ticket(1 + rng.IntN(1000))
		far := 0
		var held []scheduler.Ticket
		for i := range 20000 {
			switch k := rng.IntN(100); {
			case k < 45:
				tk := next
				switch rng.IntN(100) {
				case 0:
					tk -= scheduler.Ticket(rng.IntN(int(tk)))
				case 1:
					tk += ticketGap + scheduler.Ticket(rng.IntN(ticketGap))
					far++
				case 2:
					next += scheduler.Ticket(rng.IntN(ticketGap)) // a gap of other tickets
					tk = next
				default:
					next++
				}
				v := &reqs[rng.IntN(len(reqs))]
				x.put(tk, v)
				want[tk] = v
				held = append(held, tk)
			case k < 90 && len(held) > 0:
				j := rng.IntN(len(held))
				if rng.IntN(4) == 0 {
					j = 0 // the oldest, as timeouts take them
				}
				tk := held[j]
				held[j] = held[len(held)-1]
				held = held[:len(held)-1]
				x.remove(tk)
				delete(want, tk)
			default:
				tk := next - scheduler.Ticket(rng.IntN(2000))
				if rng.IntN(2) == 0 && len(held) > 0 {
					tk = held[rng.IntN(len(held))]
				}
				if got := x.get(tk); got != want[tk] {
					t.Fatalf("seed %d op %d: get(%d) = %p, want %p", seed, i, tk, got, want[tk])
				}
			}
		}
		for tk, v := range want {
			if got := x.get(tk); got != v {
				t.Fatalf("seed %d: get(%d) = %p, want %p", seed, tk, got, v)
			}
		}
		if far == 0 {
			t.Fatalf("seed %d: no ticket beyond the window", seed)
		}
		if x.live+len(x.other) < len(want) {
			t.Fatalf("seed %d: %d held, %d wanted", seed, x.live+len(x.other), len(want))
		}
	}
}
