// Package harness runs one benchmark end to end: it makes the client, runs
// the workload with live progress, GPU telemetry and per-request JSONL
// export, and summarizes the records into a report. The commands (run, ab,
// sweep) are thin layers over Run.
package harness

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/llmesh/llmesh/bench/client"
	"github.com/llmesh/llmesh/bench/gpu"
	"github.com/llmesh/llmesh/bench/progress"
	"github.com/llmesh/llmesh/bench/result"
	"github.com/llmesh/llmesh/bench/runner"
	"github.com/llmesh/llmesh/bench/stats"
	"github.com/llmesh/llmesh/bench/workload"
	"github.com/llmesh/llmesh/clock"
)

// Options configure one run.
type Options struct {
	// Workload is what to send; required.
	Workload *workload.Workload
	// Target is the endpoint (URL for OpenAI protocols, host:port for
	// gRPC); required.
	Target string
	// Label, Policy and Load are copied into the report.
	Label  string
	Policy string
	Load   float64
	// JSONL, when not nil, gets one JSON record per request as requests
	// finish (warm-up included, marked).
	JSONL io.Writer
	// RunID is set as every record's Run, so the records of several runs
	// can share one JSONL file.
	RunID string
	// Progress, when it is a terminal, shows a live progress line; nil or a
	// non-terminal shows nothing.
	Progress io.Writer
	// GPU samples NVML telemetry during the run at GPUInterval (default
	// 500ms); unavailable telemetry becomes a note in the report.
	GPU         bool
	GPUInterval time.Duration
	// Detailed adds vLLM's per-request arrays to the report.
	Detailed bool
	// EngineMetrics are the engines' /metrics URLs: the run reads their
	// prefix-cache counters just before and just after it and reports how
	// much they moved (Report.EnginePrefixCache).
	EngineMetrics []string
	// Clock times the run; nil means the wall clock.
	Clock clock.Clock
	// MaxConns bounds idle HTTP connections (0: 1024).
	MaxConns int
}

// Run sends the workload to the target and returns the report and the
// records. On interruption or a JSONL write failure it still returns the
// report of what completed, together with the error.
func Run(ctx context.Context, o Options) (*result.Report, []result.Record, error) {
	if o.Workload == nil {
		return nil, nil, errors.New("harness: Workload is required")
	}
	c, err := client.New(o.Workload.Spec.Protocol, o.Target, o.MaxConns)
	if err != nil {
		return nil, nil, err
	}
	defer c.Close()
	if o.Workload.Spec.Model == "" {
		// No model given: use the one the target serves. If it cannot be
		// asked, requests go without a model and the run reports whatever
		// the target answers to them.
		if m, err := client.ServedModel(ctx, o.Workload.Spec.Protocol, o.Target); err == nil && m != "" {
			w := *o.Workload
			w.Spec.Model = m
			o.Workload = &w
		}
	}

	// The runner's collector goroutine calls sink; it owns reach and the
	// encoder.
	runCtx, stopRun := context.WithCancelCause(ctx)
	defer stopRun(nil)
	var (
		reach   reachability
		bw      *bufio.Writer
		enc     *json.Encoder
		sinkErr error
	)
	if o.JSONL != nil {
		bw = bufio.NewWriterSize(o.JSONL, 64<<10)
		enc = json.NewEncoder(bw)
	}
	sink := func(r *result.Record) {
		if err := reach.observe(r); err != nil {
			stopRun(err)
		}
		if enc != nil {
			r.Run = o.RunID
			if sinkErr == nil {
				sinkErr = enc.Encode(r)
			}
		}
	}
	var sampler *gpu.Sampler
	gpuNote := "no GPU telemetry: not requested (--gpu)"
	if o.GPU {
		sampler, gpuNote = gpu.Start(ctx, o.GPUInterval, o.Clock)
	}
	live := &runner.Live{}
	label := o.Label
	if label == "" {
		label = o.Workload.Spec.Name
	}
	before, prefixErr := scrapePrefix(ctx, o.EngineMetrics)
	stop := progress.Start(ctx, o.Progress, label, expected(o.Workload), live)
	start := time.Now()
	recs, runErr := runner.Run(runCtx, runner.Options{Workload: o.Workload, Client: c, Clock: o.Clock, Sink: sink, Live: live})
	stop()
	g, _ := sampler.Stop()
	if bw != nil {
		if err := bw.Flush(); err != nil && sinkErr == nil {
			sinkErr = err
		}
	}
	rep := stats.Summarize(recs, stats.Meta{Workload: o.Workload, Target: o.Target, Label: o.Label, Policy: o.Policy, Load: o.Load, Date: start, Detailed: o.Detailed})
	rep.GPU = g
	if g == nil {
		rep.GPUNote = gpuNote
	}
	if len(o.EngineMetrics) > 0 {
		after, err := scrapePrefix(ctx, o.EngineMetrics)
		if err = errors.Join(prefixErr, err); err != nil {
			rep.EnginePrefixCacheNote = "no engine prefix-cache counters: " + err.Error()
		} else {
			rep.EnginePrefixCache = &result.EnginePrefixCache{Engines: len(o.EngineMetrics),
				QueriedTokens: int64(after.PrefixQueries - before.PrefixQueries), HitTokens: int64(after.PrefixHits - before.PrefixHits)}
		}
	}
	if sinkErr != nil {
		sinkErr = fmt.Errorf("writing per-request records: %w", sinkErr)
	}
	if cause := context.Cause(runCtx); runErr != nil && errors.Is(cause, ErrUnreachable) {
		runErr = cause
		rep.Valid = false
		rep.InvalidReasons = append(rep.InvalidReasons, "stopped early: "+runErr.Error())
	} else if runErr != nil {
		rep.Valid = false
		rep.InvalidReasons = append(rep.InvalidReasons, "run interrupted: "+runErr.Error())
	}
	return rep, recs, errors.Join(runErr, sinkErr)
}

// A run gives up on a target it cannot reach instead of running its whole
// length: while no request has got an answer and every one that ended so
// far failed to connect (result.StatusUnreachable), the run stops once
// UnreachableAttempts of them have failed or UnreachableGrace has passed
// since the first failure, and Run returns ErrUnreachable with the cause.
const (
	UnreachableAttempts = 20
	UnreachableGrace    = 5 * time.Second
)

// ErrUnreachable is what Run returns when it stopped early because the
// target could not be reached.
var ErrUnreachable = errors.New("target unreachable")

// reachability watches the records of one run as they end.
type reachability struct {
	answered bool // some request reached the target
	n        int  // requests that failed to connect
	firstNS  int64
	first    string
}

// observe folds in one ended request and returns ErrUnreachable, with the
// cause, when the run should stop.
func (u *reachability) observe(r *result.Record) error {
	switch {
	case u.answered || r.Status == result.StatusCancelled:
		return nil
	case r.Status != result.StatusUnreachable:
		u.answered = true
		return nil
	}
	if u.n == 0 {
		u.firstNS, u.first = r.DoneNS, r.Error
	}
	u.n++
	if since := time.Duration(r.DoneNS - u.firstNS); u.n >= UnreachableAttempts || since >= UnreachableGrace {
		return fmt.Errorf("%w: none of the first %d requests (over %s) could connect and none completed; first error: %s",
			ErrUnreachable, u.n, since.Round(time.Millisecond), u.first)
	}
	return nil
}

// expected estimates the number of requests for the progress bar; 0 when
// it cannot be known cheaply.
func expected(w *workload.Workload) int {
	sp := &w.Spec
	switch {
	case sp.Requests > 0:
		return sp.Requests + sp.Warmup.Requests
	case sp.Arrival.Process == workload.ArrivalTrace:
		return len(w.Trace)
	case sp.Arrival.Process != workload.ArrivalClosed && sp.Duration > 0:
		return int(w.RequestRate() * (sp.Duration.D() + sp.Warmup.Duration.D()).Seconds())
	}
	return 0
}
