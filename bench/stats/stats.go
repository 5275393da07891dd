// Package stats turns per-request records into a run report: HdrHistogram
// percentiles per class and overall, throughput, goodput and SLO attainment
// (as docs/architecture.md defines them: failed, rejected and dropped requests count as
// misses), violation breakdowns, schedule lag with validity, MLPerf-style
// early stopping and a timeline for charts. It is pure: the live runner and
// the virtual-time simulator both call Summarize.
package stats

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/llmesh/llmesh/bench/result"
	"github.com/llmesh/llmesh/bench/workload"
	"github.com/llmesh/llmesh/telemetry/attainment"
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
	index                 int // in Stream.order
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
	// One judgement for the bench and the hosts (telemetry/attainment); each
	// miss is counted once, under its first reason.
	j := attainment.Judge(attainment.Outcome{
		TTFT: ttft, HasTTFT: hasTTFT, TPOT: tpot, HasTPOT: hasTPOT, MaxTokens: r.MaxTokens,
	}, attainment.Targets{TTFT: c.ttftSLO, TPOT: c.tpotSLO})
	switch {
	case j.TTFTMissed:
		v.TTFT++
	case j.TPOTMissed:
		v.TPOT++
	case j.TPOTUnknown:
		v.TPOTUnknown++
	default:
		c.met++
	}
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
	s := NewStream(m)
	var measured []*result.Record
	for i := range recs {
		if r := &recs[i]; s.skip(r) {
			measured = append(measured, r)
		}
	}
	sort.Slice(measured, func(i, j int) bool { return measured[i].Index < measured[j].Index })
	for _, r := range measured {
		s.add(r)
	}
	return s.Report()
}

// Stream builds the report of one run from records handed over one at a
// time, so that a run need not keep its records: what the report reads
// later (the timeline, peak concurrency) is kept per record in a compact
// row (about 40 bytes), the rest is folded in at once. Measured records
// must come in increasing Index order, as Summarize sorts them: the
// report's means and sums are then added in the same order and come out
// the same to the bit. Not safe for concurrent use.
type Stream struct {
	m       Meta
	rep     *result.Report
	classes map[string]*class
	order   []*class
	names   []string // of order
	all     *class
	// allMet: overall attainment uses each request's own class SLO.
	allMet int
	lag    *metric
	// agree and agreeNeg are the engine agreement's deltas.
	agree, agreeNeg *metric

	start, end, firstIntended, lastIntended int64
	recomputed, outTotal                    int
	last                                    int // Index of the latest measured record
	firstErr                                string
	tl                                      rows
}

// NewStream starts the report of one run.
func NewStream(m Meta) *Stream {
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
	s := &Stream{m: m, rep: rep, classes: map[string]*class{}, all: newClass(0, 1, 0, 0, 0), lag: newMetric(),
		agree: newMetric(), agreeNeg: newMetric(), last: math.MinInt,
		start: math.MaxInt64, end: math.MinInt64, firstIntended: math.MaxInt64, lastIntended: math.MinInt64}
	for _, c := range w.Classes {
		s.newClass(c.Name, newClass(c.Priority, c.Share, c.TTFT, c.TPOT, c.AttainmentTarget))
	}
	return s
}

func (s *Stream) newClass(name string, cl *class) *class {
	cl.index = len(s.order)
	s.classes[name] = cl
	s.order = append(s.order, cl)
	s.names = append(s.names, name)
	s.rep.Classes[name] = cl.rep
	return cl
}

// Add folds one record in; it does not keep r.
func (s *Stream) Add(r *result.Record) error {
	if !s.skip(r) {
		return nil
	}
	if r.Index < s.last {
		return fmt.Errorf("stats: record %d after record %d: measured records must come in increasing index order", r.Index, s.last)
	}
	s.add(r)
	return nil
}

// skip counts a warm-up or cancelled record and reports whether r is
// measured.
func (s *Stream) skip(r *result.Record) bool {
	if r.Warmup {
		s.rep.Warmup++
		return false
	}
	if r.Status == result.StatusCancelled {
		s.rep.Requests[r.Status]++
		return false
	}
	return true
}

// add folds a measured record in.
func (s *Stream) add(r *result.Record) {
	rep := s.rep
	s.last = r.Index
	rep.Requests[r.Status]++
	s.start = min(s.start, r.SentNS)
	s.end = max(s.end, r.DoneNS)
	s.firstIntended, s.lastIntended = min(s.firstIntended, r.IntendedNS), max(s.lastIntended, r.IntendedNS)
	s.lag.add(r.ScheduleLag())
	s.recomputed += r.RecomputedTokens
	cl := s.classes[r.Class]
	if cl == nil {
		cl = s.newClass(r.Class, newClass(0, 0, 0, 0, 1))
	}
	before := cl.met
	cl.add(r)
	if cl.met > before {
		s.allMet++
	}
	s.all.add(r)
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
		s.outTotal += r.OutputTokens
	} else {
		rep.Failed++
	}
	if r.Error != "" && s.firstErr == "" {
		s.firstErr = r.Error
	}
	if s.m.Detailed {
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
	s.agreement(r)
	s.tl.add(r, cl.index)
}

// Report finishes the report; the stream is spent.
func (s *Stream) Report() *result.Report {
	rep, w, sp := s.rep, s.m.Workload, &s.m.Workload.Spec
	n := s.tl.len()
	start, end := s.start, s.end
	var dur float64
	if n > 0 && end > start {
		dur = float64(end-start) / 1e9
	}
	rep.Duration = dur
	all := s.all
	all.met = s.allMet
	// Offered is the arrival schedule's own rate (n−1 gaps over first →
	// last intended send), which the run's tail does not stretch. Every
	// per-second figure of what happened (achieved, throughput, goodput,
	// tokens) divides by one window: the run (first send → last end), but
	// never shorter than the schedule needs for n arrivals (n / offered).
	// Achieved counts completed requests only, so by construction
	// goodput ≤ throughput = achieved ≤ offered: requests that failed at
	// once (a dead port) never make a run look faster than its schedule.
	if n > 1 && s.lastIntended > s.firstIntended && !w.Closed() {
		rep.OfferedRPS = float64(n-1) / (float64(s.lastIntended-s.firstIntended) / 1e9)
	}
	window := dur
	if rep.OfferedRPS > 0 {
		window = max(window, float64(n)/rep.OfferedRPS)
	}
	for _, cl := range s.order {
		cl.finish(window)
	}
	all.finish(window)
	all.rep.SLOTTFTMs, all.rep.SLOTPOTMs, all.rep.AttainmentTarget, all.rep.MeetsTarget = 0, 0, 0, false
	rep.Overall = all.rep
	if window > 0 {
		rep.RequestThroughput = float64(rep.Completed) / window
		rep.RequestGoodput = float64(s.allMet) / window
		rep.OutputThroughput = float64(rep.TotalOutputTokens) / window
		rep.TotalTokenThroughput = float64(rep.TotalInputTokens+rep.TotalOutputTokens) / window
		rep.AchievedRPS = rep.RequestThroughput
	}
	lp := s.lag.percentiles()
	rep.ScheduleLagMs = result.Lag{P50: lp.P50, P99: lp.P99, Max: lp.Max}
	if s.outTotal > 0 {
		rep.RecomputedTokensFraction = float64(s.recomputed) / float64(s.outTotal)
	}
	fillVLLM(rep, all)
	rep.Timeline, rep.MaxConcurrentRequests, rep.MaxOutputTokensPerS = timeline(&s.tl, s.names, start, end)
	s.tl = rows{}
	rep.TimelineFormat = result.TimelineFormat
	rep.Engine = s.engineAgreement()

	rep.Valid = true
	if rep.Completed == 0 {
		rep.Valid = false
		rep.InvalidReasons = append(rep.InvalidReasons, noneCompleted(rep, n, s.firstErr))
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

// agreement folds r's client TTFT against the engine's own in.
func (s *Stream) agreement(r *result.Record) {
	if r.Engine == nil || r.Engine.FirstTokenNS == 0 || r.Engine.ArrivalNS == 0 {
		return
	}
	ttft, ok := r.TTFT()
	if !ok {
		return
	}
	delta := ttft - time.Duration(r.Engine.FirstTokenNS-r.Engine.ArrivalNS)
	if delta < 0 {
		s.agreeNeg.add(-delta)
		return
	}
	s.agree.add(delta)
}

func (s *Stream) engineAgreement() *result.EngineAgreement {
	d, neg := s.agree, s.agreeNeg
	if d.n+neg.n == 0 {
		return nil
	}
	a := &result.EngineAgreement{N: d.n + neg.n, DeltaMs: d.percentiles(), NegativeN: neg.n}
	if 2*neg.n > a.N {
		a.Note = "most client TTFTs are shorter than the engine's own: the engine clock runs faster than real time (llmesh sim --time-scale); compare at scale 1"
	}
	return a
}

// noneCompleted says why a run had nothing to measure: the measured
// requests' failures counted by status, and the first one's error (the
// cause is usually the same for all of them, a dead port or a wrong URL).
func noneCompleted(rep *result.Report, measured int, firstErr string) string {
	if measured == 0 {
		return "no request completed: none was measured"
	}
	var statuses []string
	for st := range rep.Requests {
		if st != result.StatusOK {
			statuses = append(statuses, string(st))
		}
	}
	sort.Strings(statuses)
	kinds := make([]string, len(statuses))
	for i, st := range statuses {
		kinds[i] = fmt.Sprintf("%d %s", rep.Requests[result.Status(st)], st)
	}
	msg := "no request completed: " + strings.Join(kinds, ", ")
	if firstErr != "" { // in index order
		return msg + "; first error: " + firstErr
	}
	return msg
}
