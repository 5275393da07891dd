package sim

// waitQueue is the engine's waiting queue: a deque in FCFS mode (preempted
// sequences go back to the front), a binary heap on (priority, arrival) in
// priority mode.
type waitQueue struct {
	priority bool
	items    []*seq // FCFS: items[head:]; priority: a heap
	head     int
}

func (w *waitQueue) len() int { return len(w.items) - w.head }

func (w *waitQueue) less(a, b *seq) bool {
	if a.priority != b.priority {
		return a.priority < b.priority
	}
	return a.order < b.order
}

func (w *waitQueue) push(q *seq) {
	q.state = stateWaiting
	if !w.priority {
		w.items = append(w.items, q)
		return
	}
	q.heapIdx = len(w.items)
	w.items = append(w.items, q)
	w.up(q.heapIdx)
}

// pushFront queues a preempted sequence: first in FCFS mode; by its
// original (priority, arrival) in priority mode, as vLLM does.
func (w *waitQueue) pushFront(q *seq) {
	if w.priority {
		w.push(q)
		return
	}
	q.state = stateWaiting
	if w.head > 0 {
		w.head--
		w.items[w.head] = q
		return
	}
	w.items = append(w.items, nil)
	copy(w.items[1:], w.items)
	w.items[0] = q
}

func (w *waitQueue) peek() *seq {
	if w.priority {
		return w.items[0]
	}
	return w.items[w.head]
}

func (w *waitQueue) pop() *seq {
	if !w.priority {
		q := w.items[w.head]
		w.items[w.head] = nil
		w.head++
		if w.head == len(w.items) {
			w.items, w.head = w.items[:0], 0
		} else if w.head > 1024 && w.head*2 > len(w.items) {
			n := copy(w.items, w.items[w.head:])
			clear(w.items[n:])
			w.items, w.head = w.items[:n], 0
		}
		return q
	}
	return w.removeAt(0)
}

func (w *waitQueue) remove(q *seq) {
	if w.priority {
		if q.heapIdx >= 0 && q.heapIdx < len(w.items) && w.items[q.heapIdx] == q {
			w.removeAt(q.heapIdx)
		}
		return
	}
	for i := w.head; i < len(w.items); i++ {
		if w.items[i] == q {
			copy(w.items[i:], w.items[i+1:])
			w.items[len(w.items)-1] = nil
			w.items = w.items[:len(w.items)-1]
			return
		}
	}
}

func (w *waitQueue) removeAt(i int) *seq {
	q := w.items[i]
	last := len(w.items) - 1
	if i != last {
		w.items[i] = w.items[last]
		w.items[i].heapIdx = i
	}
	w.items[last] = nil
	w.items = w.items[:last]
	if i < len(w.items) {
		w.down(i)
		w.up(i)
	}
	q.heapIdx = -1
	return q
}

func (w *waitQueue) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !w.less(w.items[i], w.items[p]) {
			return
		}
		w.swap(i, p)
		i = p
	}
}

func (w *waitQueue) down(i int) {
	n := len(w.items)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && w.less(w.items[r], w.items[l]) {
			m = r
		}
		if !w.less(w.items[m], w.items[i]) {
			return
		}
		w.swap(i, m)
		i = m
	}
}

func (w *waitQueue) swap(i, j int) {
	w.items[i], w.items[j] = w.items[j], w.items[i]
	w.items[i].heapIdx = i
	w.items[j].heapIdx = j
}
