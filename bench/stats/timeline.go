package stats

import (
	"math"
	"slices"
	"time"

	"github.com/llmesh/llmesh/bench/result"
)

// maxBuckets bounds the timeline; long runs get wider buckets.
const maxBuckets = 120

// row is what the timeline reads of one measured record, kept until the
// run's span (and so the buckets' width) is known.
type row struct {
	sent, done, first int64
	out               int32
	preemptions       int32 // the most the record or llmesh's header says
	class             uint16
	ok                bool
}

// rows are the measured records' rows in the order they were added; the
// rarer parts (a record's chunk times, llmesh's queue time) sit in
// parallel slices made when a record first has them.
type rows struct {
	r      []row
	chunks [][]int64 // nil, or one per row
	queue  []int64   // nil, or one per row: noQueue when none
}

// noQueue marks a row without llmesh's queue time.
const noQueue = math.MinInt64

func (t *rows) len() int { return len(t.r) }

func (t *rows) add(r *result.Record, class int) {
	p := r.Preemptions
	if r.LLMesh != nil {
		p = max(p, r.LLMesh.Preemptions)
	}
	t.r = append(t.r, row{sent: r.SentNS, done: r.DoneNS, first: r.FirstTokenNS, out: int32(r.OutputTokens),
		preemptions: int32(p), class: uint16(class), ok: r.Status == result.StatusOK})
	n := len(t.r)
	if r.ChunkNS != nil && t.chunks == nil {
		t.chunks = make([][]int64, n-1, cap(t.r))
	}
	if t.chunks != nil {
		t.chunks = append(t.chunks, r.ChunkNS)
	}
	hasQueue := r.LLMesh != nil && r.LLMesh.HasQueue
	if hasQueue && t.queue == nil {
		t.queue = make([]int64, n-1, cap(t.r))
		for i := range t.queue {
			t.queue[i] = noQueue
		}
	}
	if t.queue != nil {
		q := int64(noQueue)
		if hasQueue {
			q = r.LLMesh.QueueNS
		}
		t.queue = append(t.queue, q)
	}
}

// timeline slices the run into buckets and also returns the peak number of
// concurrent requests and the peak output tokens in any one-second window
// (vLLM's max_concurrent_requests and max_output_tokens_per_s). names
// are the class names by row class.
func timeline(recs *rows, names []string, start, end int64) ([]result.Bucket, int, float64) {
	if recs.len() == 0 || end <= start {
		return nil, 0, 0
	}
	span := end - start
	width := int64(time.Second)
	for span/width >= maxBuckets {
		width *= 2
	}
	n := int(span/width) + 1
	idx := func(t int64) int { return int(min(max(0, (t-start)/width), int64(n-1))) }
	b := make([]result.Bucket, n)
	sentD := make([]int, n+1)
	doneD := make([]int, n+1)
	firstD := make([]int, n+1)
	meshInD, meshOutD := make([]int, n+1), make([]int, n+1)
	tokens := make([]float64, n)
	perSec := make([]float64, int(span/int64(time.Second))+1)
	ttft := make([]*metric, n)
	classTTFT := make([]map[string]*metric, n)
	e2e := make([]*metric, n)

	sends, dones := make([]int64, 0, recs.len()), make([]int64, 0, recs.len())
	for i := range recs.r {
		r := &recs.r[i]
		si, di := idx(r.sent), idx(r.done)
		b[si].Sent++
		sentD[si]++
		doneD[di]++
		if r.first > 0 {
			firstD[idx(r.first)]++
		} else {
			firstD[di]++
		}
		sends, dones = append(sends, r.sent), append(dones, r.done)
		if recs.queue != nil && recs.queue[i] != noQueue {
			meshInD[si]++
			meshOutD[idx(r.sent+recs.queue[i])]++
		}
		b[di].Preemptions += int(r.preemptions)
		if !r.ok {
			b[di].Failed++
			continue
		}
		b[di].Done++
		if e2e[di] == nil {
			e2e[di], ttft[di] = newMetric(), newMetric()
		}
		e2e[di].add(time.Duration(r.done - r.sent))
		if r.first != 0 && r.first >= r.sent { // result.Record.TTFT
			t := time.Duration(r.first - r.sent)
			ttft[di].add(t)
			if classTTFT[di] == nil {
				classTTFT[di] = map[string]*metric{}
			}
			c := names[r.class]
			if classTTFT[di][c] == nil {
				classTTFT[di][c] = newMetric()
			}
			classTTFT[di][c].add(t)
		}
		// Tokens are spread evenly over the token-bearing chunks; a
		// non-streamed response puts them all at its end.
		var times []int64
		if recs.chunks != nil {
			times = recs.chunks[i]
		}
		if len(times) == 0 {
			times = []int64{r.done}
		}
		per := float64(r.out) / float64(len(times))
		for _, t := range times {
			tokens[idx(t)] += per
			perSec[min(max(0, (t-start)/int64(time.Second)), int64(len(perSec)-1))] += per
		}
	}
	inflight, queued, meshQueued := 0, 0, 0
	for i := range b {
		inflight += sentD[i] - doneD[i]
		queued += sentD[i] - firstD[i]
		meshQueued += meshInD[i] - meshOutD[i]
		b[i].MeshQueued = max(0, meshQueued)
		b[i].StartS = float64(int64(i)*width) / 1e9
		b[i].InFlight = inflight
		b[i].Queued = max(0, queued)
		b[i].OutputTokensPerS = math.Round(tokens[i]/(float64(width)/1e9)*10) / 10
		if ttft[i] != nil {
			b[i].TTFTP99Ms = ttft[i].q(99)
		}
		for c, m := range classTTFT[i] {
			if b[i].ClassTTFTP99Ms == nil {
				b[i].ClassTTFTP99Ms = map[string]float64{}
			}
			b[i].ClassTTFTP99Ms[c] = m.q(99)
			b[i].E2EP50Ms = e2e[i].q(50)
		}
	}
	// Peak concurrency by sweeping send (+1) and done (−1) events in time
	// order; ends come before starts at the same instant. The count peaks
	// only at a send, so the sweep ends with the last one.
	slices.Sort(sends)
	slices.Sort(dones)
	cur, peak, j := 0, 0, 0
	for _, t := range sends {
		for j < len(dones) && dones[j] <= t {
			cur--
			j++
		}
		cur++
		peak = max(peak, cur)
	}
	var maxTok float64
	for _, v := range perSec {
		maxTok = max(maxTok, v)
	}
	return b, peak, math.Round(maxTok*10) / 10
}
