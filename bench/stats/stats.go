// Package stats turns per-request records into a run report: HdrHistogram
// percentiles per class and overall, throughput, goodput and SLO attainment
// (as docs/architecture.md defines them: failed, rejected and dropped requests count as
// misses), violation breakdowns, schedule lag with validity, MLPerf-style
// early stopping and a timeline for charts. It is pure: the live runner and
// the virtual-time simulator both call Summarize.
package stats

import (
	"math"
	"sort"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/llmesh/llmesh/bench/result"
	"github.com/llmesh/llmesh/bench/workload"
)

// Meta describes the run being summarized.
type Meta struct {
	// Workload supplies classes, SLOs, attainment targets and validity
	// thresholds; required.
	Workload *workload.Workload
	// Target, Label, Policy and Load are copied into the report.
	Target string
	Label  string
	Policy string
	Load   float64
	// Date stamps the report; zero means unset.
	Date time.Time
	// Detailed adds vLLM's per-request arrays (input_lens, ttfts, itls, …).
	Detailed bool
}

// Histogram range: 1 µs to 1 hour at 3 significant digits.
const (
	histMin = 1
	histMax = int64(time.Hour / time.Microsecond)
	histSig = 3
)

// metric accumulates one latency metric.
type metric struct {
	h      *hdrhistogram.Histogram
	n      int
	sum    float64
	sumSq  float64
	maxVal float64
}

func newMetric() *metric { return &metric{h: hdrhistogram.New(histMin, histMax, histSig)} }

func (m *metric) add(d time.Duration) {
	us := max(0, min(histMax, d.Microseconds()))
	_ = m.h.RecordValue(us)
	ms := float64(d) / float64(time.Millisecond)
	m.n++
	m.sum += ms
	m.sumSq += ms * ms
	m.maxVal = max(m.maxVal, ms)
}

func (m *metric) q(p float64) float64 {
	if m.n == 0 {
		return 0
	}
	return float64(m.h.ValueAtPercentile(p)) / 1000
}

func (m *metric) percentiles() result.Percentiles {
	if m.n == 0 {
		return result.Percentiles{}
	}
	mean := m.sum / float64(m.n)
	return result.Percentiles{
		N: m.n, Mean: round(mean), Std: round(math.Sqrt(max(0, m.sumSq/float64(m.n)-mean*mean))),
		P50: m.q(50), P90: m.q(90), P95: m.q(95), P99: m.q(99), P999: m.q(99.9), Max: round(m.maxVal),
	}
}

// cdf samples the distribution at 1% steps plus the far tail.
func (m *metric) cdf() [][2]float64 {
	if m.n == 0 {
		return nil
	}
	var out [][2]float64
	for p := 0.0; p <= 100; p++ {
		out = append(out, [2]float64{m.q(max(p, 0.001)), p / 100})
		if p == 99 {
			out = append(out, [2]float64{m.q(99.5), 0.995}, [2]float64{m.q(99.9), 0.999})
		}
	}
	return out
}

// round keeps reports stable and readable (microsecond resolution).
func round(ms float64) float64 { return math.Round(ms*1000) / 1000 }

// class accumulates one class.
type class struct {
	rep                   *result.ClassReport
	ttft, tpot, itl, e2e  *metric
	queue                 *metric // llmesh's Server-Timing queue time
	ttftSLO, tpotSLO      time.Duration
	met, outTokens, inTok int
}

func newClass(priority int, share float64, ttft, tpot time.Duration, target float64) *class {
	return &class{
		rep: &result.ClassReport{
			Priority: priority, Share: share, AttainmentTarget: target,
			SLOTTFTMs: ms(ttft), SLOTPOTMs: ms(tpot),
		},
		ttft: newMetric(), tpot: newMetric(), itl: newMetric(), e2e: newMetric(), queue: newMetric(),
		ttftSLO: ttft, tpotSLO: tpot,
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// add folds one measured record in.
func (c *class) add(r *result.Record) {
	c.rep.Requests++
	c.rep.Preemptions += r.Preemptions
	c.inTok += r.PromptTokens
	if r.LLMesh != nil && r.LLMesh.HasQueue {
		c.queue.add(time.Duration(r.LLMesh.QueueNS))
	}
	v := &c.rep.Violations
	switch r.Status {
	case result.StatusOK:
	case result.StatusRejected:
		c.rep.Failed++
		v.Rejected++
		return
	case result.StatusQueueFull:
		c.rep.Failed++
		v.QueueFull++
		return
	case result.StatusPreempted:
		c.rep.Failed++
		v.Preempted++
		return
	default:
		c.rep.Failed++
		v.Error++
		return
	}
	c.rep.Completed++
	c.outTokens += r.OutputTokens
	c.e2e.add(r.E2E())
	ttft, hasTTFT := r.TTFT()
	if hasTTFT {
		c.ttft.add(ttft)
	}
	tpot, hasTPOT := r.TPOT()
	if hasTPOT {
		c.tpot.add(tpot)
	}
	for i := 1; i < len(r.ChunkNS); i++ {
		c.itl.add(time.Duration(r.ChunkNS[i] - r.ChunkNS[i-1]))
	}
	switch {
	case c.ttftSLO > 0 && (!hasTTFT || ttft > c.ttftSLO):
		v.TTFT++
	case c.tpotSLO > 0 && hasTPOT && tpot > c.tpotSLO:
		v.TPOT++
	case c.tpotSLO > 0 && !hasTPOT && !singleToken(r):
		// A TPOT that cannot be computed is unknown, and unknown does not
		// meet an SLO (an engine that reported no usage once passed every
		// TPOT SLO this way).
		v.TPOTUnknown++
	default:
		c.met++
	}
}

// singleToken reports a request that asked for one output token and got
// it: it has no time per output token to hold to an SLO.
func singleToken(r *result.Record) bool {
	_, hasTTFT := r.TTFT()
	return hasTTFT && r.MaxTokens == 1 && r.OutputTokens == 1
}

func (c *class) finish(dur float64) {
	r := c.rep
	r.TTFTMs, r.TPOTMs, r.ITLMs, r.E2EMs = c.ttft.percentiles(), c.tpot.percentiles(), c.itl.percentiles(), c.e2e.percentiles()
	if c.queue.n > 0 {
		q := c.queue.percentiles()
		r.QueueMs = &q
	}
	if r.Requests > 0 {
		r.SLOAttainment = float64(c.met) / float64(r.Requests)
	}
	if dur > 0 {
		r.GoodputRPS = float64(c.met) / dur
		r.ThroughputRPS = float64(r.Completed) / dur
		r.OutputTokensPerS = float64(c.outTokens) / dur
	}
	r.MeetsTarget = r.Requests > 0 && r.SLOAttainment >= r.AttainmentTarget
	for _, p := range []float64{0.9, 0.99} {
		r.EarlyStopping = append(r.EarlyStopping, earlyStop("ttft", p, c.ttft), earlyStop("tpot", p, c.tpot))
	}
	r.TTFTCDF = c.ttft.cdf()
}

// Summarize builds the report of one run. Warm-up records are counted but
// left out of every statistic; records may come in any order.
func Summarize(recs []result.Record, m Meta) *result.Report {
	w := m.Workload
	sp := &w.Spec
	rep := &result.Report{
		Backend: sp.Protocol, Label: m.Label, ModelID: sp.Model, TokenizerID: sp.Model,
		Burstiness: sp.Arrival.Burstiness, Workload: sp.Name, Profile: sp.Profile, Target: m.Target,
		Protocol: sp.Protocol, Seed: sp.Seed, Policy: m.Policy, Load: m.Load,
		Requests: map[result.Status]int{}, Classes: map[string]*result.ClassReport{},
	}
	if !m.Date.IsZero() {
		rep.Date = m.Date.UTC().Format("20060102-150405")
	}
	switch sp.Arrival.Process {
	case workload.ArrivalClosed:
		rep.MaxConcurrency = sp.Arrival.Concurrency
	case workload.ArrivalTrace:
	default:
		rep.RequestRate = w.RequestRate()
	}
	classes := map[string]*class{}
	var order []*class
	for _, c := range w.Classes {
		cl := newClass(c.Priority, c.Share, c.TTFT, c.TPOT, c.AttainmentTarget)
		classes[c.Name] = cl
		order = append(order, cl)
		rep.Classes[c.Name] = cl.rep
	}
	all := newClass(0, 1, 0, 0, 0)
	// Overall attainment uses each request's own class SLO.
	var allMet int
	lag := newMetric()

	var measured []*result.Record
	for i := range recs {
		r := &recs[i]
		if r.Warmup {
			rep.Warmup++
			continue
		}
		if r.Status == result.StatusCancelled {
			rep.Requests[r.Status]++
			continue
		}
		measured = append(measured, r)
	}
	sort.Slice(measured, func(i, j int) bool { return measured[i].Index < measured[j].Index })

	var start, end, firstIntended, lastIntended int64 = math.MaxInt64, math.MinInt64, math.MaxInt64, math.MinInt64
	var recomputed, outTotal int
	for _, r := range measured {
		rep.Requests[r.Status]++
		start = min(start, r.SentNS)
		end = max(end, r.DoneNS)
		firstIntended, lastIntended = min(firstIntended, r.IntendedNS), max(lastIntended, r.IntendedNS)
		lag.add(r.ScheduleLag())
		recomputed += r.RecomputedTokens
		cl := classes[r.Class]
		if cl == nil {
			cl = newClass(0, 0, 0, 0, 1)
			classes[r.Class] = cl
			order = append(order, cl)
			rep.Classes[r.Class] = cl.rep
		}
		before := cl.met
		cl.add(r)
		if cl.met > before {
			allMet++
		}
		all.add(r)
		rep.NumPrompts++
		rep.TotalInputTokens += r.PromptTokens
		if r.Status == result.StatusOK {
			if r.OutputTokensSource != "" {
				if rep.OutputTokensSource == nil {
					rep.OutputTokensSource = map[string]int{}
				}
				rep.OutputTokensSource[r.OutputTokensSource]++
			}
			rep.Completed++
			rep.TotalOutputTokens += r.OutputTokens
			outTotal += r.OutputTokens
		} else {
			rep.Failed++
		}
		if m.Detailed {
			rep.InputLens = append(rep.InputLens, r.PromptTokens)
			rep.OutputLens = append(rep.OutputLens, r.OutputTokens)
			t, _ := r.TTFT()
			rep.TTFTs = append(rep.TTFTs, t.Seconds())
			var itl []float64
			for i := 1; i < len(r.ChunkNS); i++ {
				itl = append(itl, time.Duration(r.ChunkNS[i]-r.ChunkNS[i-1]).Seconds())
			}
			rep.ITLs = append(rep.ITLs, itl)
			rep.Errors = append(rep.Errors, r.Error)
		}
	}
	var dur float64
	if len(measured) > 0 && end > start {
		dur = float64(end-start) / 1e9
	}
	rep.Duration = dur
	for _, cl := range order {
		cl.finish(dur)
	}
	all.met = allMet
	all.finish(dur)
	all.rep.SLOTTFTMs, all.rep.SLOTPOTMs, all.rep.AttainmentTarget, all.rep.MeetsTarget = 0, 0, 0, false
	rep.Overall = all.rep
	if dur > 0 {
		rep.RequestThroughput = float64(rep.Completed) / dur
		rep.RequestGoodput = float64(allMet) / dur
		rep.OutputThroughput = float64(rep.TotalOutputTokens) / dur
		rep.TotalTokenThroughput = float64(rep.TotalInputTokens+rep.TotalOutputTokens) / dur
	}
	// Every per-second figure of what happened (achieved, throughput,
	// goodput, tokens) divides by the same run window, first send → last
	// end, so goodput ≤ throughput ≤ achieved always holds; only offered
	// is the arrival schedule's own rate (n−1 gaps over first → last
	// intended send), which the run's tail does not stretch.
	if dur > 0 {
		rep.AchievedRPS = float64(len(measured)) / dur
	}
	if n := len(measured); n > 1 && lastIntended > firstIntended {
		rep.OfferedRPS = float64(n-1) / (float64(lastIntended-firstIntended) / 1e9)
	}
	if w.Closed() {
		rep.OfferedRPS = 0
	}
	lp := lag.percentiles()
	rep.ScheduleLagMs = result.Lag{P50: lp.P50, P99: lp.P99, Max: lp.Max}
	if outTotal > 0 {
		rep.RecomputedTokensFraction = float64(recomputed) / float64(outTotal)
	}
	fillVLLM(rep, all)
	rep.Timeline, rep.MaxConcurrentRequests, rep.MaxOutputTokensPerS = timeline(measured, start, end)
	rep.TimelineFormat = result.TimelineFormat
	rep.Engine = engineAgreement(measured)

	rep.Valid = true
	if rep.Completed == 0 {
		rep.Valid = false
		rep.InvalidReasons = append(rep.InvalidReasons, "no request completed")
	}
	if !w.Closed() {
		checkLag(sp, rep, lp.P99)
	}
	return rep
}

func fillVLLM(r *result.Report, all *class) {
	t, p, i, e := all.rep.TTFTMs, all.rep.TPOTMs, all.rep.ITLMs, all.rep.E2EMs
	r.MeanTTFTMs, r.MedianTTFTMs, r.StdTTFTMs, r.P50TTFTMs, r.P90TTFTMs, r.P95TTFTMs, r.P99TTFTMs, r.P999TTFTMs = t.Mean, t.P50, t.Std, t.P50, t.P90, t.P95, t.P99, t.P999
	r.MeanTPOTMs, r.MedianTPOTMs, r.StdTPOTMs, r.P50TPOTMs, r.P90TPOTMs, r.P95TPOTMs, r.P99TPOTMs, r.P999TPOTMs = p.Mean, p.P50, p.Std, p.P50, p.P90, p.P95, p.P99, p.P999
	r.MeanITLMs, r.MedianITLMs, r.StdITLMs, r.P50ITLMs, r.P90ITLMs, r.P95ITLMs, r.P99ITLMs, r.P999ITLMs = i.Mean, i.P50, i.Std, i.P50, i.P90, i.P95, i.P99, i.P999
	r.MeanE2ELMs, r.MedianE2ELMs, r.StdE2ELMs, r.P50E2ELMs, r.P90E2ELMs, r.P95E2ELMs, r.P99E2ELMs, r.P999E2ELMs = e.Mean, e.P50, e.Std, e.P50, e.P90, e.P95, e.P99, e.P999
}

func engineAgreement(recs []*result.Record) *result.EngineAgreement {
	d := newMetric()
	neg := newMetric()
	for _, r := range recs {
		if r.Engine == nil || r.Engine.FirstTokenNS == 0 || r.Engine.ArrivalNS == 0 {
			continue
		}
		ttft, ok := r.TTFT()
		if !ok {
			continue
		}
		delta := ttft - time.Duration(r.Engine.FirstTokenNS-r.Engine.ArrivalNS)
		if delta < 0 {
			neg.add(-delta)
			continue
		}
		d.add(delta)
	}
	if d.n+neg.n == 0 {
		return nil
	}
	a := &result.EngineAgreement{N: d.n + neg.n, DeltaMs: d.percentiles(), NegativeN: neg.n}
	if 2*neg.n > a.N {
		a.Note = "most client TTFTs are shorter than the engine's own: the engine clock runs faster than real time (llmesh sim --time-scale); compare at scale 1"
	}
	return a
}
