package scheduler

// slotIndex keeps what the preemption walk (preemptwalk.go) needs from a pool's
// running requests up to date as they change, so that a walk does not pass
// over all of them: under a deep backlog a pool runs thousands, the walk
// runs at every event, and most events change one request.
//
//   - The slot wait is the least remaining time (preempt.go, remaining) of
//     the running requests not being preempted. For a request with a first
//     token it is its tokens left times a speed that is the same for every
//     request of its class (the pool's observed decode speed, or the class's
//     TPOT objective before any), capped at forever: non-decreasing in the
//     tokens left. So the least of a class is that of its request with the
//     fewest tokens left, the top of a min-heap by tokens left, one per
//     class. Requests without a first token add a prefill term that depends
//     on their admission time; they are few (those in prefill) and are
//     looked at one by one.
//   - The walk's bound on victims counts, per class, the running requests
//     not being preempted that are under max_per_request.
//   - The victim search (preemptwalk.go, victims) counts, per class, the
//     running requests not being preempted: with those and the counts
//     under max_per_request it knows without a pass how many less urgent
//     requests run and when none of them may be a victim, which under a
//     backlog of less urgent requests at risk is nearly every search (no
//     class is less urgent than theirs).
//
// Only pools whose policy preempts keep the index.
type slotIndex struct {
	byClass []leftHeap // requests with a first token and MaxTokens > 0
	// prefill: requests without a first token (entry.slot is the index).
	prefill []*entry
	// under: per class, requests under max_per_request (the victim bound).
	under []int
	// active: per class, every request (not being preempted).
	active []int
}

// leftItem is one request in a leftHeap with its tokens left, kept in the
// item so that sifting compares without loading the entries.
type leftItem struct {
	left int
	e    *entry
}

// leftHeap is a binary min-heap by tokens left; entry.slot is the index.
type leftHeap []leftItem

func newSlotIndex(classes int) slotIndex {
	return slotIndex{byClass: make([]leftHeap, classes), under: make([]int, classes), active: make([]int, classes)}
}

// tokensLeft is what remaining counts for r's decode.
func tokensLeft(r *entry) int { return max(0, r.req.MaxTokens-r.tokens) }

// admitted adds e, just admitted (no first token yet, not preempting).
func (x *slotIndex) admitted(p *pool, e *entry) {
	e.slot = len(x.prefill)
	x.prefill = append(x.prefill, e)
	x.active[e.class.index]++
	if e.preempts < p.Preemption.MaxPerRequest {
		x.under[e.class.index]++
	}
}

// progressed updates e after Progress changed its first token or tokens;
// wasFirst is whether it had a first token before.
func (x *slotIndex) progressed(e *entry, wasFirst bool) {
	if e.preempting {
		return
	}
	if !wasFirst {
		x.removePrefill(e)
		if e.req.MaxTokens > 0 {
			x.byClass[e.class.index].push(e)
		}
		return
	}
	if e.req.MaxTokens > 0 {
		x.byClass[e.class.index].decreased(e)
	}
}

// left removes e, which stops counting: it finished or is being preempted.
// Call it once, while e.preempting is still false.
func (x *slotIndex) left(p *pool, e *entry) {
	x.active[e.class.index]--
	if e.preempts < p.Preemption.MaxPerRequest {
		x.under[e.class.index]--
	}
	switch {
	case !e.firstToken:
		x.removePrefill(e)
	case e.req.MaxTokens > 0:
		x.byClass[e.class.index].remove(e)
	}
}

func (x *slotIndex) removePrefill(e *entry) {
	last := x.prefill[len(x.prefill)-1]
	x.prefill[e.slot], last.slot = last, e.slot
	x.prefill[len(x.prefill)-1] = nil
	x.prefill = x.prefill[:len(x.prefill)-1]
}

func (h *leftHeap) push(e *entry) {
	e.slot = len(*h)
	*h = append(*h, leftItem{left: tokensLeft(e), e: e})
	h.up(e.slot)
}

// decreased restores the order after e's tokens grew (its tokens left
// cannot grow).
func (h leftHeap) decreased(e *entry) {
	h[e.slot].left = tokensLeft(e)
	h.up(e.slot)
}

func (h *leftHeap) remove(e *entry) {
	s := *h
	i, n := e.slot, len(s)-1
	if i != n {
		s.swap(i, n)
	}
	s[n] = leftItem{}
	s = s[:n]
	*h = s
	if i != n {
		s.down(i)
		s.up(i)
	}
}

func (h leftHeap) swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].e.slot, h[j].e.slot = i, j
}

func (h leftHeap) up(i int) {
	for i > 0 {
		parent := (i - 1) / 2
		if h[parent].left <= h[i].left {
			return
		}
		h.swap(i, parent)
		i = parent
	}
}

func (h leftHeap) down(i int) {
	n := len(h)
	for {
		c := 2*i + 1
		if c >= n {
			return
		}
		if r := c + 1; r < n && h[r].left < h[c].left {
			c = r
		}
		if h[i].left <= h[c].left {
			return
		}
		h.swap(i, c)
		i = c
	}
}
