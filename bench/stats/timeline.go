package stats

import (
	"math"
	"slices"
	"time"

	"github.com/llmesh/llmesh/bench/result"
)

// maxBuckets bounds the timeline; long runs get wider buckets.
const maxBuckets = 120

// timeline slices the run into buckets and also returns the peak number of
// concurrent requests and the peak output tokens in any one-second window
// (vLLM's max_concurrent_requests and max_output_tokens_per_s).
func timeline(recs []*result.Record, start, end int64) ([]result.Bucket, int, float64) {
	if len(recs) == 0 || end <= start {
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

	sends, dones := make([]int64, 0, len(recs)), make([]int64, 0, len(recs))
	for _, r := range recs {
		si, di := idx(r.SentNS), idx(r.DoneNS)
		b[si].Sent++
		sentD[si]++
		doneD[di]++
		if r.FirstTokenNS > 0 {
			firstD[idx(r.FirstTokenNS)]++
		} else {
			firstD[di]++
		}
		sends, dones = append(sends, r.SentNS), append(dones, r.DoneNS)
		if r.LLMesh != nil && r.LLMesh.HasQueue {
			meshInD[si]++
			meshOutD[idx(r.SentNS+r.LLMesh.QueueNS)]++
		}
		if r.LLMesh != nil {
			b[di].Preemptions += max(r.Preemptions, r.LLMesh.Preemptions)
		} else {
			b[di].Preemptions += r.Preemptions
		}
		if r.Status != result.StatusOK {
			b[di].Failed++
			continue
		}
		b[di].Done++
		if e2e[di] == nil {
			e2e[di], ttft[di] = newMetric(), newMetric()
		}
		e2e[di].add(r.E2E())
		if t, ok := r.TTFT(); ok {
			ttft[di].add(t)
			if classTTFT[di] == nil {
				classTTFT[di] = map[string]*metric{}
			}
			if classTTFT[di][r.Class] == nil {
				classTTFT[di][r.Class] = newMetric()
			}
			classTTFT[di][r.Class].add(t)
		}
		// Tokens are spread evenly over the token-bearing chunks; a
		// non-streamed response puts them all at its end.
		times := r.ChunkNS
		if len(times) == 0 {
			times = []int64{r.DoneNS}
		}
		per := float64(r.OutputTokens) / float64(len(times))
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
