package loadgen

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llmesh/llmesh/clock"
	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/scheduler"
)

// Options configure Run.
type Options struct {
	// Proxies are the admitters the load goes through, one per simulated
	// proxy (typically a scheduler/client.Client each, with its own
	// connection). Required.
	Proxies []scheduler.Admitter
	// Rate is the open-loop target in admissions per second over all
	// proxies (each gets an equal share); 0 runs closed-loop with Inflight.
	Rate float64
	// Inflight is the closed-loop number of requests in flight over all
	// proxies (split as evenly as it goes); used when Rate is 0.
	Inflight int
	// Arrivals is "poisson" (exponential gaps, the default) or "uniform"
	// (equal gaps), open loop only.
	Arrivals string
	// Warmup runs load that is not measured before the measured Duration.
	Warmup   time.Duration
	Duration time.Duration
	// FirstToken is how long an admitted request waits before it reports
	// its first token, Hold how long after that it is released; 0 each
	// means at once (the service's decision cost alone).
	FirstToken, Hold time.Duration
	// Mix is what the requests ask for. Required.
	Mix Mix
	// MaxOutstanding bounds the open-loop requests not yet released; an
	// arrival past it is counted in Report.Dropped instead of sent (a
	// stalled service must not grow the client without bound). 0 means
	// 200,000.
	MaxOutstanding int
	// Seed makes the arrivals and the request mix repeatable.
	Seed uint64
	// Clock measures and schedules; nil is the real clock.
	Clock clock.Clock
	// ServiceCPU, when set, reads the CPU time the service has used so far
	// (PrometheusCPU(url) reads the service's Prometheus endpoint): Run reads
	// it as the measured window starts and as it ends and reports the
	// service's CPU per admission, a figure far steadier than latency on
	// a busy machine. Nil reports none.
	ServiceCPU func(context.Context) (time.Duration, error)
}

// Mix is the requests' pools, classes and sizes.
type Mix struct {
	Pools   []string
	Classes []string
	// PromptTokens and MaxTokens are drawn uniformly from [Min, Max].
	PromptTokens, MaxTokens [2]int
	// AffinityKeys is how many distinct affinity keys requests carry
	// (drawn uniformly); 0 sends none.
	AffinityKeys int
}

// MixFromMesh takes the pools (not the experiment arms' pools) and classes
// of a mesh config, with prompts of 64..2048 and 16..512 output tokens.
func MixFromMesh(c *config.Config) (Mix, error) {
	m := Mix{PromptTokens: [2]int{64, 2048}, MaxTokens: [2]int{16, 512}}
	for _, p := range c.Pools {
		m.Pools = append(m.Pools, p.Name)
	}
	for _, cl := range c.Classes {
		m.Classes = append(m.Classes, cl.Name)
	}
	if len(m.Pools) == 0 {
		return Mix{}, errors.New("pools: the mesh config has none to admit to")
	}
	if len(m.Classes) == 0 {
		m.Classes = []string{""} // the default class
	}
	return m, nil
}

// Report is what a run measured. Latencies are in microseconds.
type Report struct {
	Mode string `json:"mode"` // "open" or "closed"
	// Wire says how the proxies talked to the service (protocol,
	// transport, report delay), when the caller says (scheduler bench).
	Wire       string  `json:"wire,omitempty"`
	Proxies    int     `json:"proxies"`
	TargetRate float64 `json:"target_rate,omitempty"` // open loop, admissions/s
	Arrivals   string  `json:"arrivals,omitempty"`
	Inflight   int     `json:"inflight,omitempty"` // closed loop
	DurationS  float64 `json:"duration_s"`
	// Sent counts the measured requests sent (open loop: the arrivals of
	// the measured window that were not dropped). Admissions counts those
	// admitted; AdmissionsPerS is that over the measured duration.
	Sent           uint64  `json:"sent"`
	Admissions     uint64  `json:"admissions"`
	AdmissionsPerS float64 `json:"admissions_per_s"`
	// Decision is the decision latency: from the Admit call to the answer
	// (Admitted), both loops. Time a request waits in the service's queue
	// counts; how late this client made the call does not.
	Decision Quantiles `json:"decision_us"`
	// Queued is the part of Decision the service says the request waited
	// in its queue (the lease's QueueTime: for capacity or a bound such as
	// max_prefill_tokens); the rest is the protocol's and the hosts'.
	Queued Quantiles `json:"queued_us"`
	// FromScheduled is, open loop, from the arrival's scheduled send time
	// to the answer: Decision plus ScheduleLag, what a caller arriving on
	// that schedule would see if this client were never late.
	FromScheduled *Quantiles `json:"from_scheduled_us,omitempty"`
	// ScheduleLag is, open loop, how late the Admit call left against its
	// scheduled time: large values mean this client could not keep up,
	// and the run measured the client as much as the service.
	ScheduleLag *Quantiles `json:"schedule_lag_us,omitempty"`
	// Rejected are answers Rejected or queue full; Errors every other
	// failure (unavailable, cancelled), ErrorSamples the first few of them.
	Rejected     uint64   `json:"rejected"`
	Errors       uint64   `json:"errors"`
	ErrorSamples []string `json:"error_samples,omitempty"`
	// Dropped are open-loop arrivals not sent because MaxOutstanding
	// requests were already outstanding.
	Dropped uint64 `json:"dropped"`
	// ServiceCPU is the service's CPU time over the measured window, when
	// Options.ServiceCPU is set (and the run was not stopped early).
	ServiceCPU *ServiceCPU `json:"service_cpu,omitempty"`
}

// ServiceCPU is what the service's CPU counter said over the measured
// window.
type ServiceCPU struct {
	// Seconds of CPU the service used; PerAdmissionUS is that divided by
	// the admissions, in microseconds. The counter (process_cpu_seconds_total)
	// counts in the kernel's ticks, 10 ms on Linux.
	Seconds        float64 `json:"seconds"`
	PerAdmissionUS float64 `json:"per_admission_us"`
	// Error says why there are no figures when reading the counter failed.
	Error string `json:"error,omitempty"`
}

// Quantiles of a latency sample, in microseconds.
type Quantiles struct {
	N    int     `json:"n"`
	P50  float64 `json:"p50"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p999"`
	Max  float64 `json:"max"`
}

func quantiles(d []time.Duration) Quantiles {
	if len(d) == 0 {
		return Quantiles{}
	}
	slices.Sort(d)
	q := func(p float64) float64 {
		i := int(p * float64(len(d)-1))
		return float64(d[i]) / float64(time.Microsecond)
	}
	return Quantiles{N: len(d), P50: q(0.50), P99: q(0.99), P999: q(0.999), Max: float64(d[len(d)-1]) / float64(time.Microsecond)}
}

// Validate reports every problem of o at once, each naming its field.
func (o *Options) Validate() error {
	var errs []error
	if len(o.Proxies) == 0 {
		errs = append(errs, errors.New("proxies: at least one is required"))
	}
	switch {
	case o.Rate < 0:
		errs = append(errs, fmt.Errorf("rate: %v must not be negative", o.Rate))
	case o.Rate == 0 && o.Inflight <= 0:
		errs = append(errs, errors.New("rate or inflight: one must be positive"))
	case o.Rate > 0 && o.Inflight > 0:
		errs = append(errs, errors.New("rate and inflight: set one (open loop or closed loop), not both"))
	}
	if o.Rate == 0 && o.Inflight > 0 && o.Inflight < len(o.Proxies) {
		errs = append(errs, fmt.Errorf("inflight: %d is fewer than the %d proxies", o.Inflight, len(o.Proxies)))
	}
	switch o.Arrivals {
	case "", "poisson", "uniform":
	default:
		errs = append(errs, fmt.Errorf("arrivals: %q must be poisson or uniform", o.Arrivals))
	}
	if o.Duration <= 0 {
		errs = append(errs, fmt.Errorf("duration: %v must be positive", o.Duration))
	}
	for name, d := range map[string]time.Duration{"warmup": o.Warmup, "first_token": o.FirstToken, "hold": o.Hold} {
		if d < 0 {
			errs = append(errs, fmt.Errorf("%s: %v must not be negative", name, d))
		}
	}
	if len(o.Mix.Pools) == 0 || len(o.Mix.Classes) == 0 {
		errs = append(errs, errors.New("mix: needs at least one pool and one class"))
	}
	for name, r := range map[string][2]int{"mix.prompt_tokens": o.Mix.PromptTokens, "mix.max_tokens": o.Mix.MaxTokens} {
		if r[0] < 0 || r[1] < r[0] {
			errs = append(errs, fmt.Errorf("%s: [%d, %d] is not a range of counts", name, r[0], r[1]))
		}
	}
	return errors.Join(errs...)
}

// Gaps returns the inter-arrival times of one open-loop stream at rate per
// second: exponential (poisson) or constant (uniform).
func Gaps(kind string, rate float64, rng *rand.Rand) func() time.Duration {
	mean := float64(time.Second) / rate
	if kind == "uniform" {
		return func() time.Duration { return time.Duration(mean) }
	}
	return func() time.Duration { return time.Duration(rng.ExpFloat64() * mean) }
}

// recorder collects one proxy's measurements.
type recorder struct {
	mu        sync.Mutex
	decisions []time.Duration // from the Admit call
	queued    []time.Duration // the service's queue time
	scheduled []time.Duration // from the scheduled send (open loop)
	lags      []time.Duration
	samples   []string
	sent      atomic.Uint64
	admitted  atomic.Uint64
	rejected  atomic.Uint64
	errors    atomic.Uint64
	dropped   atomic.Uint64
}

const maxSamples = 5

// run is one Run in progress.
type run struct {
	o                 Options
	clk               clock.Clock
	measureFrom, stop time.Time
	outstanding       atomic.Int64
}

// Run drives the load and reports what it measured. ctx's end stops it
// early (the report then covers what ran).
func Run(ctx context.Context, o Options) (Report, error) {
	if err := o.Validate(); err != nil {
		return Report{}, err
	}
	o.defaults()
	start := o.Clock.Now()
	r := &run{o: o, clk: o.Clock, measureFrom: start.Add(o.Warmup), stop: start.Add(o.Warmup + o.Duration)}
	recs := make([]*recorder, len(o.Proxies))
	for i := range recs {
		recs[i] = &recorder{}
	}
	cpu := r.drive(ctx, recs, start)
	measured := o.Duration
	if ctx.Err() != nil { // stopped early: what ran of the measured part
		measured = min(max(r.clk.Now().Sub(r.measureFrom), 0), o.Duration)
	}
	return r.report(recs, cpu, measured, ctx.Err() != nil), nil
}

// defaults fills in the options left zero.
func (o *Options) defaults() {
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Arrivals == "" {
		o.Arrivals = "poisson"
	}
	if o.MaxOutstanding <= 0 {
		o.MaxOutstanding = 200_000
	}
}

// drive runs the senders (one pacer in the open loop, one closed loop per
// proxy otherwise) and the CPU sampler until the run ends.
func (r *run) drive(ctx context.Context, recs []*recorder, start time.Time) cpuWindow {
	o := r.o
	var wg sync.WaitGroup
	var cpu cpuWindow
	if o.ServiceCPU != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cpu = r.sampleCPU(ctx)
		}()
	}
	if o.Rate > 0 {
		// One pacer for every proxy: a spinning sender per proxy would
		// keep every P busy, and a Go program whose Ps never go idle polls
		// the network only from sysmon (every 10 ms), which delays every
		// answer the proxies wait for.
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.openLoop(ctx, recs, rand.New(rand.NewPCG(o.Seed, 0)), start)
		}()
	}
	for i, a := range o.Proxies {
		if o.Rate > 0 {
			break
		}
		rng := rand.New(rand.NewPCG(o.Seed, uint64(i)))
		n := o.Inflight / len(o.Proxies)
		if i < o.Inflight%len(o.Proxies) {
			n++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.closedLoop(ctx, a, recs[i], rng, n)
		}()
	}
	wg.Wait()
	return cpu
}

// report sums the recorders over the measured time; stopped says ctx
// ended the run early.
func (r *run) report(recs []*recorder, cpu cpuWindow, measured time.Duration, stopped bool) Report {
	o := r.o
	rep := Report{Mode: "closed", Proxies: len(o.Proxies), Inflight: o.Inflight, DurationS: measured.Seconds()}
	if o.Rate > 0 {
		rep.Mode, rep.TargetRate, rep.Arrivals, rep.Inflight = "open", o.Rate, o.Arrivals, 0
	}
	var decisions, queued, scheduled, lags []time.Duration
	for _, rc := range recs {
		decisions = append(decisions, rc.decisions...)
		queued = append(queued, rc.queued...)
		scheduled = append(scheduled, rc.scheduled...)
		lags = append(lags, rc.lags...)
		rc.addCounts(&rep)
	}
	if measured > 0 {
		rep.AdmissionsPerS = float64(rep.Admissions) / measured.Seconds()
	}
	switch {
	case cpu.err != nil:
		rep.ServiceCPU = &ServiceCPU{Error: cpu.err.Error()}
	case o.ServiceCPU != nil && !stopped:
		rep.ServiceCPU = &ServiceCPU{Seconds: cpu.used.Seconds()}
		if rep.Admissions > 0 {
			rep.ServiceCPU.PerAdmissionUS = float64(cpu.used) / float64(time.Microsecond) / float64(rep.Admissions)
		}
	}
	rep.Decision = quantiles(decisions)
	rep.Queued = quantiles(queued)
	if o.Rate > 0 {
		q, s := quantiles(lags), quantiles(scheduled)
		rep.ScheduleLag, rep.FromScheduled = &q, &s
	}
	return rep
}

// addCounts adds the recorder's counts and error samples to rep.
func (rc *recorder) addCounts(rep *Report) {
	rep.Sent += rc.sent.Load()
	rep.Admissions += rc.admitted.Load()
	rep.Rejected += rc.rejected.Load()
	rep.Errors += rc.errors.Load()
	rep.Dropped += rc.dropped.Load()
	for _, s := range rc.samples {
		if len(rep.ErrorSamples) < maxSamples {
			rep.ErrorSamples = append(rep.ErrorSamples, s)
		}
	}
}

// cpuWindow is the service's CPU time over the measured window.
type cpuWindow struct {
	used time.Duration
	err  error
}

// sampleCPU reads the service's CPU time as the measured window starts and
// as it ends.
func (r *run) sampleCPU(ctx context.Context) cpuWindow {
	var at [2]time.Duration
	for i, when := range []time.Time{r.measureFrom, r.stop} {
		t := r.clk.NewTimer(max(0, when.Sub(r.clk.Now())))
		select {
		case <-t.C():
		case <-ctx.Done():
			t.Stop()
			return cpuWindow{}
		}
		t.Stop()
		v, err := r.o.ServiceCPU(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return cpuWindow{}
			}
			return cpuWindow{err: fmt.Errorf("service CPU: %w", err)}
		}
		at[i] = v
	}
	if at[1] < at[0] {
		return cpuWindow{err: fmt.Errorf("service CPU: went back from %v to %v (did the service restart?)", at[0], at[1])}
	}
	return cpuWindow{used: at[1] - at[0]}
}

// spinAhead is how long before a send time the open loop stops sleeping
// on a timer and spins (yielding to other goroutines) with the real
// clock: Go's timers wake up to about a millisecond late (the runtime
// sleeps in whole milliseconds), which would add up to a millisecond of
// schedule lag to every send. With one processor (GOMAXPROCS 1, a client
// pinned to one core) it does not spin: a goroutine that is always
// runnable keeps the only processor from polling the network, so every
// answer would wait for the runtime's monitor (10 ms); the timers'
// lateness shows in the schedule lag instead.
const spinAhead = time.Millisecond

// openLoop sends the arrivals at their scheduled times, to the proxies in
// turn (so each proxy's arrivals are the same kind of process at its share
// of the rate), each request on its own goroutine, until the run's end;
// then it waits for the requests still outstanding.
func (r *run) openLoop(ctx context.Context, recs []*recorder, rng *rand.Rand, start time.Time) {
	gap := Gaps(r.o.Arrivals, r.o.Rate, rng)
	turn := 0
	var reqs sync.WaitGroup
	defer reqs.Wait()
	spin := time.Duration(0)
	if _, real := r.clk.(clock.Real); real && runtime.GOMAXPROCS(0) > 1 {
		spin = spinAhead
	}
	next := start.Add(gap())
	var timer clock.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		if wait := next.Sub(r.clk.Now()) - spin; wait > 0 || spin == 0 {
			if timer == nil {
				timer = r.clk.NewTimer(max(0, wait))
			} else {
				timer.Reset(max(0, wait))
			}
			select {
			case <-timer.C():
			case <-ctx.Done():
				return
			}
		}
		for spin > 0 && r.clk.Now().Before(next) {
			if ctx.Err() != nil {
				return
			}
			runtime.Gosched()
		}
		now := r.clk.Now()
		for !next.After(now) {
			if !next.Before(r.stop) {
				return
			}
			scheduled := next
			next = next.Add(gap())
			measured := !scheduled.Before(r.measureFrom)
			a, rec := r.o.Proxies[turn], recs[turn]
			turn = (turn + 1) % len(recs)
			if r.outstanding.Load() >= int64(r.o.MaxOutstanding) {
				if measured {
					rec.dropped.Add(1)
				}
				continue
			}
			req := r.request(rng)
			r.outstanding.Add(1)
			reqs.Add(1)
			go func() {
				defer reqs.Done()
				defer r.outstanding.Add(-1)
				r.one(ctx, a, rec, req, scheduled, measured, true)
			}()
		}
	}
}

// closedLoop keeps n requests of one proxy in flight until the run's end.
func (r *run) closedLoop(ctx context.Context, a scheduler.Admitter, rec *recorder, rng *rand.Rand, n int) {
	var workers sync.WaitGroup
	reqs := make(chan scheduler.Request)
	for i := 0; i < n; i++ {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for req := range reqs {
				begin := r.clk.Now()
				r.one(ctx, a, rec, req, begin, !begin.Before(r.measureFrom), false)
			}
		}()
	}
	// One goroutine draws the mix (the rng is not safe for concurrent use).
	for ctx.Err() == nil && r.clk.Now().Before(r.stop) {
		select {
		case reqs <- r.request(rng):
		case <-ctx.Done():
		}
	}
	close(reqs)
	workers.Wait()
}

func (r *run) request(rng *rand.Rand) scheduler.Request {
	m := r.o.Mix
	pick := func(lohi [2]int) int { return lohi[0] + rng.IntN(lohi[1]-lohi[0]+1) }
	req := scheduler.Request{
		Pool:         m.Pools[rng.IntN(len(m.Pools))],
		Class:        m.Classes[rng.IntN(len(m.Classes))],
		PromptTokens: pick(m.PromptTokens),
		MaxTokens:    pick(m.MaxTokens),
	}
	if m.AffinityKeys > 0 {
		req.Affinity = fmt.Sprintf("session-%d", rng.IntN(m.AffinityKeys))
	}
	return req
}

// one is one request: admit, first token, release.
func (r *run) one(ctx context.Context, a scheduler.Admitter, rec *recorder, req scheduler.Request, from time.Time, measured, open bool) {
	begin := r.clk.Now()
	req.Arrival = begin
	if measured {
		rec.sent.Add(1)
	}
	l, err := a.Admit(ctx, req)
	decided := r.clk.Now()
	if err != nil {
		if !measured || (ctx.Err() != nil && errors.Is(err, scheduler.ErrCancelled)) {
			return
		}
		if errors.Is(err, scheduler.ErrRejected) || errors.Is(err, scheduler.ErrQueueFull) {
			rec.rejected.Add(1)
			return
		}
		rec.errors.Add(1)
		rec.mu.Lock()
		if len(rec.samples) < maxSamples {
			rec.samples = append(rec.samples, strings.TrimSpace(err.Error()))
		}
		rec.mu.Unlock()
		return
	}
	if measured {
		rec.admitted.Add(1)
		rec.mu.Lock()
		rec.decisions = append(rec.decisions, decided.Sub(begin))
		rec.queued = append(rec.queued, l.QueueTime())
		if open {
			rec.scheduled = append(rec.scheduled, decided.Sub(from))
			rec.lags = append(rec.lags, begin.Sub(from))
		}
		rec.mu.Unlock()
	}
	r.wait(ctx, r.o.FirstToken)
	l.Progress(scheduler.Progress{FirstToken: true, Tokens: 1})
	r.wait(ctx, r.o.Hold)
	l.Release(scheduler.Done)
}

func (r *run) wait(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := r.clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
	case <-ctx.Done():
	}
}
