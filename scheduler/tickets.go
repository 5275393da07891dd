package scheduler

// ticketTable finds a live request by its ticket. Every Progress looks one
// up, once per token streamed, so the lookup is an index rather than a
// hash: tickets are handed out in sequence, and the live ones are mostly
// the last few thousand, so ticket modulo a power of two at least twice
// the live count is a slot of its own. A request that outlives that many
// newer ones (a long stream behind steady traffic) gives its slot up and
// moves to a map; memory stays proportional to the live requests.
type ticketTable struct {
	slots []*entry // by ticket & (len-1); nil: free
	live  int      // in slots
	old   map[Ticket]*entry
}

const ticketTableMin = 64

func (t *ticketTable) get(k Ticket) *entry {
	if len(t.slots) > 0 {
		if e := t.slots[uint64(k)&uint64(len(t.slots)-1)]; e != nil && e.ticket == k {
			return e
		}
	}
	if len(t.old) == 0 {
		return nil
	}
	return t.old[k]
}

// put adds e, whose ticket is newer than every one in the table.
func (t *ticketTable) put(e *entry) {
	if 2*(t.live+1) > len(t.slots) {
		t.grow()
	}
	i := uint64(e.ticket) & uint64(len(t.slots)-1)
	if prev := t.slots[i]; prev != nil {
		if t.old == nil {
			t.old = map[Ticket]*entry{}
		}
		t.old[prev.ticket] = prev
		t.live--
	}
	t.slots[i] = e
	t.live++
}

func (t *ticketTable) remove(k Ticket) {
	if len(t.slots) > 0 {
		i := uint64(k) & uint64(len(t.slots)-1)
		if e := t.slots[i]; e != nil && e.ticket == k {
			t.slots[i] = nil
			t.live--
			return
		}
	}
	delete(t.old, k)
}

// grow doubles the slots; the requests in them keep theirs modulo the new
// size, where two cannot meet (they were distinct modulo the old one).
func (t *ticketTable) grow() {
	n := max(ticketTableMin, 2*len(t.slots))
	slots := make([]*entry, n)
	for _, e := range t.slots {
		if e != nil {
			slots[uint64(e.ticket)&uint64(n-1)] = e
		}
	}
	t.slots = slots
}
