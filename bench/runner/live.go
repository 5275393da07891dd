package runner

import (
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/llmesh/llmesh/bench/result"
)

// Live is a run's progress as it happens: counters updated from the
// request goroutines (atomics) and per-class TTFT histograms updated by the
// collector goroutine (under mu). Snapshot may be called from any goroutine.
type Live struct {
	sent, inFlight, done, failed atomic.Int64

	mu   sync.Mutex
	ttft map[string]*hdrhistogram.Histogram
}

// Snapshot is a point-in-time view of a Live.
type Snapshot struct {
	Sent, InFlight, Done, Failed int64
	// TTFTP99Ms is the p99 TTFT so far per class, over successful requests.
	TTFTP99Ms map[string]float64
	// Classes lists the classes seen so far, sorted.
	Classes []string
}

func (l *Live) start() {
	l.sent.Add(1)
	l.inFlight.Add(1)
}

func (l *Live) finish(r *result.Record) {
	l.inFlight.Add(-1)
	l.done.Add(1)
	if r.Status != result.StatusOK {
		l.failed.Add(1)
		return
	}
	t, ok := r.TTFT()
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ttft == nil {
		l.ttft = map[string]*hdrhistogram.Histogram{}
	}
	h := l.ttft[r.Class]
	if h == nil {
		h = hdrhistogram.New(1, int64(time.Hour/time.Microsecond), 2)
		l.ttft[r.Class] = h
	}
	_ = h.RecordValue(t.Microseconds())
}

// Snapshot reads the current state.
func (l *Live) Snapshot() Snapshot {
	s := Snapshot{Sent: l.sent.Load(), InFlight: l.inFlight.Load(), Done: l.done.Load(), Failed: l.failed.Load(), TTFTP99Ms: map[string]float64{}}
	l.mu.Lock()
	defer l.mu.Unlock()
	for c, h := range l.ttft {
		s.TTFTP99Ms[c] = float64(h.ValueAtQuantile(99)) / 1000
		s.Classes = append(s.Classes, c)
	}
	sort.Strings(s.Classes)
	return s
}
