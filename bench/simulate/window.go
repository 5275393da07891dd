package simulate

import "github.com/llmesh/llmesh/bench/workload"

// requests are a run's arrived requests in arrival order, as the client
// timeouts walk them (a run's window).
type requests interface {
	len() int
	at(i int) *vreq
}

// slabSize is how many requests (and their records) one slab of a
// window holds.
const slabSize = 1024

type slab struct {
	v [slabSize]vreq
}

// window holds a fleet's requests from the oldest one not yet handed to
// the run's summary to the latest arrival, in slabs that are dropped once
// every request of theirs is handed over: a run keeps the requests in
// flight, not all of them. Requests never move, so pointers to them (in
// messages, attempts, the ticket index) stay valid; a dropped slab lives
// on while anything still points into it.
type window struct {
	slabs []*slab
	base  int // index of slabs[0]'s first request
	n     int // requests arrived
}

func (w *window) len() int { return w.n }

func (w *window) at(i int) *vreq {
	i -= w.base
	return &w.slabs[i/slabSize].v[i%slabSize]
}

// push adds the next arrival; its record comes with its admission or its
// end (vreq.running).
func (w *window) push(it workload.Item, proxy int) *vreq {
	i := w.n - w.base
	if i/slabSize == len(w.slabs) {
		w.slabs = append(w.slabs, new(slab))
	}
	s := w.slabs[i/slabSize]
	v := &s.v[i%slabSize]
	*v = vreq{it: compact(it), proxy: int32(proxy)}
	w.n++
	return v
}

// dropBefore drops the slabs whose requests all come before index i.
func (w *window) dropBefore(i int) {
	k := (i - w.base) / slabSize
	if k == 0 {
		return
	}
	n := copy(w.slabs, w.slabs[k:])
	clear(w.slabs[n:])
	w.slabs = w.slabs[:n]
	w.base += k * slabSize
}
