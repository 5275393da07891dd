package workload

import (
	"container/heap"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"github.com/llmesh/llmesh/bench/trace"
)

// Workload is the compiled, immutable form of a Spec. It is safe for
// concurrent use; each Source it makes has its own random state.
type Workload struct {
	// Spec is the defaulted, validated spec it was compiled from.
	Spec Spec
	// Classes are the compiled classes, in spec order.
	Classes []Class
	// Trace is the replayed trace for arrival process trace, else nil.
	Trace []trace.Row
	// TraceHashIDs, when set, are the Mooncake hash_ids of each Trace row
	// (same index): the prompts' block identity.
	TraceHashIDs [][]uint64
	// perArrival is the mean number of requests an arrival brings (1
	// without sessions): see RequestRate.
	perArrival float64
}

// Class is a compiled class.
type Class struct {
	Name             string
	Priority         int
	SendPriority     bool
	Share            float64 // normalized to sum to 1
	TTFT, TPOT       time.Duration
	AttainmentTarget float64
	Headers          map[string]string
	prompt, output   sampler
	// SystemPromptTokens and session: see ClassSpec.
	SystemPromptTokens int
	session            *sessionSampler
}

// sessionSampler is a compiled Session.
type sessionSampler struct {
	turns, think sampler
	maxContext   int
}

// fits reports whether a turn of a msg-token message and an out-token
// reply after hist tokens of history stays within the limits; a turn that
// does not ends its session.
func (s *sessionSampler) fits(hist, msg, out int) bool {
	return hist+msg <= MaxLength && (s.maxContext == 0 || hist+msg+out <= s.maxContext)
}

// CompileOptions tune Compile.
type CompileOptions struct {
	// BaseDir resolves relative trace paths; empty means the working
	// directory.
	BaseDir string
	// ReadTrace loads a trace; nil means trace.ReadFile. Traces named twice
	// are read once.
	ReadTrace func(path string) ([]trace.Row, error)
}

// Compile turns a defaulted, validated Spec into a Workload, loading the
// traces it names.
func Compile(s *Spec, o CompileOptions) (*Workload, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	read := o.ReadTrace
	if read == nil {
		read = trace.ReadFile
	}
	cache := map[string][]trace.Row{}
	load := func(field, p string) ([]trace.Row, error) {
		if !filepath.IsAbs(p) && o.BaseDir != "" {
			p = filepath.Join(o.BaseDir, p)
		}
		if rows, ok := cache[p]; ok {
			return rows, nil
		}
		rows, err := read(p)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", field, err)
		}
		cache[p] = rows
		return rows, nil
	}
	w := &Workload{Spec: *s}
	if s.Arrival.Process == ArrivalTrace {
		rows, err := load("arrival.trace", s.Arrival.Trace)
		if err != nil {
			return nil, err
		}
		w.Trace = rows
	}
	var total float64
	for _, c := range s.Classes {
		total += c.Share
	}
	for i, c := range s.Classes {
		cc := Class{
			Name: c.Name, Priority: c.Priority, SendPriority: *c.SendPriority,
			Share: c.Share / total, TTFT: c.SLO.TTFT.D(), TPOT: c.SLO.TPOT.D(),
			AttainmentTarget: c.AttainmentTarget, Headers: c.Headers,
		}
		var err error
		if cc.prompt, err = compileDist(c.Prompt, fmt.Sprintf("classes[%d].prompt_tokens", i), 0, load); err != nil {
			return nil, err
		}
		if cc.output, err = compileDist(c.Output, fmt.Sprintf("classes[%d].output_tokens", i), 1, load); err != nil {
			return nil, err
		}
		cc.SystemPromptTokens = c.SystemPromptTokens
		if ss := c.Session; ss != nil {
			cc.session = &sessionSampler{maxContext: ss.MaxContextTokens}
			if cc.session.turns, err = compileDist(ss.Turns, fmt.Sprintf("classes[%d].session.turns", i), 1, load); err != nil {
				return nil, err
			}
			if cc.session.think, err = compileDist(ss.ThinkTimeMS, fmt.Sprintf("classes[%d].session.think_time_ms", i), 0, load); err != nil {
				return nil, err
			}
		}
		w.Classes = append(w.Classes, cc)
	}
	w.perArrival = w.requestsPerArrival()
	return w, nil
}

// RequestRate is the workload's offered request rate in requests per
// second for an open arrival process: the arrival rate times the mean
// number of requests an arrival brings (a session's turns; 1 otherwise).
// 0 for a closed loop or a trace.
func (w *Workload) RequestRate() float64 {
	switch w.Spec.Arrival.Process {
	case ArrivalClosed, ArrivalTrace:
		return 0
	}
	return w.Spec.Arrival.Rate * max(w.perArrival, 1)
}

// requestsPerArrival estimates the mean number of requests per arrival
// from sessionSamples arrivals drawn with their own random streams (the
// same every time for the same spec): the sessions' turns, each counted
// unless the context cap ends the session first.
func (w *Workload) requestsPerArrival() float64 {
	any := false
	for _, c := range w.Classes {
		any = any || c.session != nil
	}
	if !any {
		return 1
	}
	const sessionSamples = 4000
	seed := uint64(w.Spec.Seed)
	s := &Source{w: w, cls: rand.New(rand.NewPCG(seed, 0xe57c)), lens: rand.New(rand.NewPCG(seed, 0xe57d))}
	total := 0
	for range sessionSamples {
		c := &w.Classes[s.pickClass()]
		if c.session == nil {
			total++
			continue
		}
		hist := c.SystemPromptTokens
		for range c.session.turns.sample(s.lens, nil, false) {
			msg, out := c.prompt.sample(s.lens, nil, false), c.output.sample(s.lens, nil, true)
			if !c.session.fits(hist, msg, out) {
				break
			}
			total++
			hist += msg + out
		}
	}
	return float64(total) / sessionSamples
}

// Closed reports whether the workload is a closed loop (arrival process
// closed): items then carry no send time and the runner keeps
// Spec.Arrival.Concurrency requests in flight.
func (w *Workload) Closed() bool { return w.Spec.Arrival.Process == ArrivalClosed }

// ScaleRate returns a copy whose offered load is f times this one's: rates
// are multiplied by f, a replayed trace is compressed by f, and a closed
// loop's concurrency is scaled (at least 1). Sweeps and virtual-time loads use
// it.
func (w *Workload) ScaleRate(f float64) *Workload {
	c := *w
	c.Classes = append([]Class(nil), w.Classes...)
	switch c.Spec.Arrival.Process {
	case ArrivalTrace:
		c.Spec.Arrival.TimeScale /= f
	case ArrivalClosed:
		c.Spec.Arrival.Concurrency = max(1, int(math.Round(float64(c.Spec.Arrival.Concurrency)*f)))
	default:
		c.Spec.Arrival.Rate *= f
	}
	return &c
}

// WithTrace returns a copy that replays rows: arrivals from their times
// (scaled by the spec's time_scale), lengths from their token counts, classes
// drawn by share. llmesh bench simulate --trace uses it.
func (w *Workload) WithTrace(rows []trace.Row) *Workload {
	c := *w
	c.Spec.Arrival.Process = ArrivalTrace
	c.Trace = rows
	c.Classes = append([]Class(nil), w.Classes...)
	for i := range c.Classes {
		c.Classes[i].prompt = sampler{kind: DistTrace}
		c.Classes[i].output = sampler{kind: DistTrace, minLen: 1}
	}
	return &c
}

// WithMooncake is WithTrace for a Mooncake trace: items also carry the
// rows' hash_ids, so prompts share blocks where the trace says they do.
func (w *Workload) WithMooncake(rows []trace.MooncakeRow) *Workload {
	plain := make([]trace.Row, len(rows))
	ids := make([][]uint64, len(rows))
	for i, r := range rows {
		plain[i], ids[i] = r.Row, r.HashIDs
	}
	c := w.WithTrace(plain)
	c.TraceHashIDs = ids
	return c
}

// Item is one request to send.
type Item struct {
	// Index counts items from 0, warm-up included.
	Index int
	// Class indexes Workload.Classes.
	Class int
	// At is the intended send time relative to the start of the run; zero
	// for a closed loop.
	At time.Duration
	// PromptTokens and MaxTokens size the request; the harness asks the
	// engine to ignore EOS so the output has exactly MaxTokens tokens.
	PromptTokens, MaxTokens int
	// Warmup marks items excluded from statistics.
	Warmup bool
	// Segments, when set, give the prompt's tokens an identity
	// (trace.PromptTokens turns them into tokens; they hold PromptTokens
	// tokens): a Mooncake replay's blocks, a class's system prompt, a
	// session's history. Prompts share a prefix exactly where their
	// segments agree. Nil: the prompt shares nothing with any other.
	Segments []trace.Segment
	// Session and Turn number a multi-turn session's requests (Session
	// from 1 in order of arrival, Turn from 1); both 0 outside sessions.
	Session uint64
	Turn    int
}

// Source produces a workload's items in order. Not safe for concurrent use.
type Source struct {
	w                   *Workload
	arr, cls, lens, ids *rand.Rand
	next                int
	arrivals            int
	at                  time.Duration // the next arrival's time, once arrReady
	arrReady            bool
	measured            int
	warmupEnd           time.Duration
	warmupEndKnown      bool
	traceAt             int
	turns               turnHeap // sessions' later turns, by send time
	sessions            uint64
}

// pendingTurn is a session's next turn, due at at.
type pendingTurn struct {
	at      time.Duration
	session uint64
	class   int
	turn    int
	left    int             // turns after this one
	history []trace.Segment // the prompt so far, without the new message
}

// turnHeap orders pending turns by time, then by session (deterministic).
type turnHeap []*pendingTurn

func (h turnHeap) Len() int { return len(h) }
func (h turnHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].session < h[j].session
}
func (h turnHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *turnHeap) Push(x any)   { *h = append(*h, x.(*pendingTurn)) }
func (h *turnHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return t
}

// Source returns a new item source; every Source of a Workload yields the
// same sequence (the seed is fixed in the spec).
func (w *Workload) Source() *Source {
	seed := uint64(w.Spec.Seed)
	return &Source{
		w:    w,
		arr:  rand.New(rand.NewPCG(seed, 0xa77)),
		cls:  rand.New(rand.NewPCG(seed, 0xc1a5)),
		lens: rand.New(rand.NewPCG(seed, 0x1e45)),
		ids:  rand.New(rand.NewPCG(seed, 0x5e55)),
	}
}

// systemPromptID is the segment id of class i's system prompt: the same in
// every run of the same workload name, different between classes.
func (w *Workload) systemPromptID(i int) uint64 {
	h := fnv.New64a()
	h.Write([]byte(w.Spec.Name))
	h.Write([]byte{0})
	h.Write([]byte(w.Classes[i].Name))
	return h.Sum64()
}

// Next returns the next item, or false when the workload is exhausted. For
// a closed loop with only a duration bound it never ends; the runner stops
// it by time.
func (s *Source) Next() (Item, bool) {
	for {
		it, turn, sized, ok := s.nextArrival()
		if !ok {
			return Item{}, false
		}
		if !s.admit(&it) {
			return Item{}, false
		}
		if turn != nil {
			if !s.sessionTurn(&it, turn) {
				continue // the session ended at its context cap
			}
		} else {
			s.fill(&it, sized)
		}
		if !it.Warmup {
			s.measured++
		}
		it.Index = s.next
		s.next++
		return it, true
	}
}

// nextArrival returns the next item's time and class, either a new
// arrival or a session's turn, whichever is due first; a replayed trace
// row comes sized (sized true).
func (s *Source) nextArrival() (it Item, turn *pendingTurn, sized, ok bool) {
	sp := &s.w.Spec
	switch sp.Arrival.Process {
	case ArrivalTrace:
		if s.traceAt >= len(s.w.Trace) {
			return Item{}, nil, false, false
		}
		row := &s.w.Trace[s.traceAt]
		it.At = time.Duration(float64(row.At) * sp.Arrival.TimeScale)
		it.Class = s.pickClass()
		c := &s.w.Classes[it.Class]
		it.PromptTokens = c.prompt.sample(s.lens, row, false)
		it.MaxTokens = c.output.sample(s.lens, row, true)
		if s.w.TraceHashIDs != nil {
			it.Segments = trace.MooncakeSegments(nil, s.w.TraceHashIDs[s.traceAt], it.PromptTokens)
		}
		s.traceAt++
		return it, nil, true, true
	case ArrivalClosed:
		it.Class = s.pickClass()
		return it, nil, false, true
	}
	if !s.arrReady {
		if s.arrivals > 0 {
			s.at += s.gap()
		}
		s.arrivals++
		s.arrReady = true
	}
	if len(s.turns) > 0 && s.turns[0].at < s.at {
		t := heap.Pop(&s.turns).(*pendingTurn)
		return Item{At: t.at, Class: t.class}, t, false, true
	}
	s.arrReady = false
	it.At = s.at
	it.Class = s.pickClass()
	if c := &s.w.Classes[it.Class]; c.session != nil {
		s.sessions++
		t := &pendingTurn{at: it.At, session: s.sessions, class: it.Class, turn: 1}
		t.left = c.session.turns.sample(s.lens, nil, false) - 1
		if c.SystemPromptTokens > 0 {
			t.history = []trace.Segment{{ID: s.w.systemPromptID(it.Class), Tokens: c.SystemPromptTokens}}
		}
		return it, t, false, true
	}
	return it, nil, false, true
}

// admit applies the warm-up and the run's bounds to an item due at it.At;
// false ends the workload.
func (s *Source) admit(it *Item) bool {
	sp := &s.w.Spec
	it.Warmup = s.next < sp.Warmup.Requests || (!s.w.Closed() && it.At < sp.Warmup.Duration.D())
	if it.Warmup {
		return true
	}
	if !s.warmupEndKnown {
		s.warmupEndKnown = true
		s.warmupEnd = max(it.At, sp.Warmup.Duration.D())
	}
	if sp.Requests > 0 && s.measured >= sp.Requests {
		return false
	}
	if sp.Duration > 0 && !s.w.Closed() && it.At >= s.warmupEnd+sp.Duration.D() {
		return false
	}
	return true
}

// fill sizes an item that is not a session's turn (unless sized) and
// puts the class's system prompt in front of it.
func (s *Source) fill(it *Item, sized bool) {
	c := &s.w.Classes[it.Class]
	if !sized {
		it.PromptTokens = c.prompt.sample(s.lens, nil, false)
		it.MaxTokens = c.output.sample(s.lens, nil, true)
	}
	if c.SystemPromptTokens > 0 {
		sys := trace.Segment{ID: s.w.systemPromptID(it.Class), Tokens: c.SystemPromptTokens}
		if it.Segments != nil { // a replayed prompt keeps its own identity after the system prompt
			it.Segments = append([]trace.Segment{sys}, it.Segments...)
		} else {
			it.Segments = []trace.Segment{sys, {ID: s.ids.Uint64(), Tokens: it.PromptTokens}}
		}
		it.PromptTokens = min(it.PromptTokens+c.SystemPromptTokens, MaxLength)
	}
}

// sessionTurn sizes a session's turn and schedules its next one; false
// when the turn would pass the session's context cap (the session ends).
func (s *Source) sessionTurn(it *Item, t *pendingTurn) bool {
	c := &s.w.Classes[it.Class]
	msg := c.prompt.sample(s.lens, nil, false)
	out := c.output.sample(s.lens, nil, true)
	hist := trace.SegmentsTokens(t.history)
	if !c.session.fits(hist, msg, out) {
		return false
	}
	segs := make([]trace.Segment, len(t.history), len(t.history)+1)
	copy(segs, t.history)
	segs = append(segs, trace.Segment{ID: s.ids.Uint64(), Tokens: msg})
	it.Segments, it.PromptTokens, it.MaxTokens = segs, hist+msg, out
	it.Session, it.Turn = t.session, t.turn
	if t.left > 0 {
		think := time.Duration(c.session.think.sample(s.lens, nil, false)) * time.Millisecond
		next := &pendingTurn{at: t.at + think, session: t.session, class: t.class, turn: t.turn + 1, left: t.left - 1}
		next.history = append(segs[:len(segs):len(segs)], trace.Segment{ID: s.ids.Uint64(), Tokens: out})
		heap.Push(&s.turns, next)
	}
	return true
}

func (s *Source) pickClass() int {
	cs := s.w.Classes
	if len(cs) == 1 {
		return 0
	}
	u := s.cls.Float64()
	for i, c := range cs {
		u -= c.Share
		if u < 0 {
			return i
		}
	}
	for i := len(cs) - 1; i >= 0; i-- {
		if cs[i].Share > 0 {
			return i
		}
	}
	return 0
}

// gap is the next inter-arrival time.
func (s *Source) gap() time.Duration {
	a := s.w.Spec.Arrival
	mean := float64(time.Second) / a.Rate
	switch a.Process {
	case ArrivalConstant:
		return time.Duration(mean)
	case ArrivalGamma:
		// vLLM bench serve: shape = burstiness, scale = 1/(rate·burstiness),
		// so the mean stays 1/rate while the variance grows as burstiness
		// falls.
		return time.Duration(gammaSample(s.arr, a.Burstiness) * mean / a.Burstiness)
	default:
		return time.Duration(s.arr.ExpFloat64() * mean)
	}
}

// gammaSample draws from Gamma(shape, 1) (Marsaglia and Tsang, 2000).
func gammaSample(r *rand.Rand, shape float64) float64 {
	if shape < 1 {
		return gammaSample(r, shape+1) * math.Pow(r.Float64(), 1/shape)
	}
	d := shape - 1.0/3
	c := 1 / math.Sqrt(9*d)
	for {
		x := r.NormFloat64()
		v := 1 + c*x
		if v <= 0 {
			continue
		}
		v = v * v * v
		u := r.Float64()
		if u < 1-0.0331*x*x*x*x || math.Log(u) < 0.5*x*x+d*(1-v+math.Log(v)) {
			return d * v
		}
	}
}

// sampler is a compiled length distribution.
type sampler struct {
	kind          string
	value         int
	lo, hi        int // clamp bounds; hi 0 means none
	median, sigma float64
	samples       []int
	minLen        int
}

func compileDist(d Dist, field string, minLen int, load func(field, p string) ([]trace.Row, error)) (sampler, error) {
	s := sampler{kind: d.Kind, value: d.Value, lo: max(d.Min, minLen), hi: d.Max, median: d.Median, sigma: d.Sigma, minLen: minLen}
	if d.Kind == DistEmpirical {
		rows, err := load(field+".trace", d.Trace)
		if err != nil {
			return s, err
		}
		s.samples = make([]int, len(rows))
		for i, r := range rows {
			s.samples[i] = r.PromptTokens
			if d.Column == "generated" {
				s.samples[i] = r.OutputTokens
			}
		}
	}
	return s, nil
}

func (s sampler) sample(r *rand.Rand, row *trace.Row, output bool) int {
	var n int
	switch s.kind {
	case DistFixed:
		return s.value
	case DistUniform:
		return s.lo + r.IntN(s.hi-s.lo+1)
	case DistLognormal:
		n = int(math.Round(s.median * math.Exp(s.sigma*r.NormFloat64())))
	case DistEmpirical:
		n = s.samples[r.IntN(len(s.samples))]
	case DistTrace:
		if row == nil {
			return s.minLen
		}
		n = row.PromptTokens
		if output {
			n = row.OutputTokens
		}
	}
	n = max(n, s.lo, s.minLen)
	if s.hi > 0 {
		n = min(n, s.hi)
	}
	return min(n, MaxLength)
}

// WithTraceFile returns a copy that replays the trace at path (WithTrace
// or WithMooncake) at its own pace (time scale 1); format empty means
// detected from the file's first bytes (trace.Detect).
func (w *Workload) WithTraceFile(path string, format trace.Format) (*Workload, error) {
	if format == "" {
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("trace: %w", err)
		}
		head := make([]byte, 512)
		n, err := io.ReadFull(f, head)
		f.Close()
		if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("trace: %s: %w", path, err)
		}
		format = trace.Detect(head[:n])
	}
	var c *Workload
	if format == trace.FormatMooncake {
		rows, err := trace.ReadMooncakeFile(path)
		if err != nil {
			return nil, err
		}
		c = w.WithMooncake(rows)
	} else {
		rows, err := trace.ReadFile(path)
		if err != nil {
			return nil, err
		}
		c = w.WithTrace(rows)
	}
	if len(c.Trace) == 0 {
		return nil, fmt.Errorf("trace: %s: no requests", path)
	}
	c.Spec.Arrival.TimeScale = 1
	return c, nil
}
