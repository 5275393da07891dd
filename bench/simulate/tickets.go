package simulate

import "github.com/llmesh/llmesh/scheduler"

// ticketIndex maps a scheduler machine's tickets to the requests they
// stand for. A machine hands out tickets in increasing order, so the index
// is a window of a slice from the oldest ticket it still holds: a lookup is
// an index, not a hash of a map of a million waiting requests. A ticket
// below the window, or far beyond it, goes to a map.
type ticketIndex struct {
	base  scheduler.Ticket // the ticket of vs[head]
	vs    []*vreq
	head  int
	live  int // non-nil in vs
	other map[scheduler.Ticket]*vreq
}

// ticketGap is how far beyond the window a ticket may be and still extend
// it; tickets are sequential, so only a gap of rejected or other
// machines' tickets lies between.
const ticketGap = 1 << 16

func (x *ticketIndex) slot(tk scheduler.Ticket) (int, bool) {
	if tk < x.base {
		return 0, false
	}
	d := uint64(tk - x.base)
	if d >= uint64(len(x.vs)-x.head) {
		return 0, false
	}
	return x.head + int(d), true
}

func (x *ticketIndex) put(tk scheduler.Ticket, v *vreq) {
	if x.live == 0 {
		clear(x.vs)
		x.vs, x.head, x.base = x.vs[:0], 0, tk
	}
	if len(x.other) > 0 {
		delete(x.other, tk)
	}
	if i, ok := x.slot(tk); ok {
		if x.vs[i] == nil {
			x.live++
		}
		x.vs[i] = v
		return
	}
	if tk >= x.base {
		if d := uint64(tk - x.base); d < uint64(len(x.vs)-x.head)+ticketGap {
			if x.head > 0 && x.head*2 >= len(x.vs) {
				n := copy(x.vs, x.vs[x.head:])
				clear(x.vs[n:])
				x.vs, x.head = x.vs[:n], 0
			}
			for uint64(len(x.vs)-x.head) < d {
				x.vs = append(x.vs, nil)
			}
			x.vs = append(x.vs, v)
			x.live++
			return
		}
	}
	if x.other == nil {
		x.other = map[scheduler.Ticket]*vreq{}
	}
	x.other[tk] = v
}

func (x *ticketIndex) get(tk scheduler.Ticket) *vreq {
	if i, ok := x.slot(tk); ok && x.vs[i] != nil {
		return x.vs[i]
	}
	return x.other[tk]
}

func (x *ticketIndex) remove(tk scheduler.Ticket) {
	i, ok := x.slot(tk)
	if !ok || x.vs[i] == nil {
		delete(x.other, tk)
		return
	}
	x.vs[i] = nil
	x.live--
	for x.head < len(x.vs) && x.vs[x.head] == nil {
		x.head++
		x.base++
	}
}
