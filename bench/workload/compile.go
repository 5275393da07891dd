package workload

import (
	"fmt"
	"math"
	"math/rand/v2"
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
		w.Classes = append(w.Classes, cc)
	}
	return w, nil
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
	// HashIDs, for a Mooncake trace replay, are the prompt's 512-token
	// block ids (trace.PromptTokens turns them into tokens); nil otherwise.
	// Shared with the Workload: read only.
	HashIDs []uint64
}

// Source produces a workload's items in order. Not safe for concurrent use.
type Source struct {
	w              *Workload
	arr, cls, lens *rand.Rand
	next           int
	at             time.Duration
	measured       int
	warmupEnd      time.Duration
	warmupEndKnown bool
	traceAt        int
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
	}
}

// Next returns the next item, or false when the workload is exhausted. For
// a closed loop with only a duration bound it never ends; the runner stops
// it by time.
func (s *Source) Next() (Item, bool) {
	sp := &s.w.Spec
	it := Item{Index: s.next}
	var row *trace.Row
	switch sp.Arrival.Process {
	case ArrivalTrace:
		if s.traceAt >= len(s.w.Trace) {
			return Item{}, false
		}
		row = &s.w.Trace[s.traceAt]
		if s.w.TraceHashIDs != nil {
			it.HashIDs = s.w.TraceHashIDs[s.traceAt]
		}
		s.traceAt++
		it.At = time.Duration(float64(row.At) * sp.Arrival.TimeScale)
	case ArrivalClosed:
	default:
		if s.next > 0 {
			s.at += s.gap()
		}
		it.At = s.at
	}
	it.Warmup = s.next < sp.Warmup.Requests || (!s.w.Closed() && it.At < sp.Warmup.Duration.D())
	if !it.Warmup {
		if !s.warmupEndKnown {
			s.warmupEndKnown = true
			s.warmupEnd = max(it.At, sp.Warmup.Duration.D())
		}
		if sp.Requests > 0 && s.measured >= sp.Requests {
			return Item{}, false
		}
		if sp.Duration > 0 && !s.w.Closed() && it.At >= s.warmupEnd+sp.Duration.D() {
			return Item{}, false
		}
		s.measured++
	}
	it.Class = s.pickClass()
	c := &s.w.Classes[it.Class]
	it.PromptTokens = c.prompt.sample(s.lens, row, false)
	it.MaxTokens = c.output.sample(s.lens, row, true)
	s.next++
	return it, true
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
