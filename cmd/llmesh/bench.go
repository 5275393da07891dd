package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/llmesh/llmesh/bench/harness"
	"github.com/llmesh/llmesh/bench/progress"
	"github.com/llmesh/llmesh/bench/provenance"
	"github.com/llmesh/llmesh/bench/report"
	"github.com/llmesh/llmesh/bench/result"
	"github.com/llmesh/llmesh/bench/stats"
	"github.com/llmesh/llmesh/bench/trace"
	"github.com/llmesh/llmesh/bench/workload"
	"github.com/llmesh/llmesh/cmd/llmesh/internal/flag"
)

// benchCommands is the table of `llmesh bench` subcommands. A subcommand in
// another file joins it with one line:
//
//	var _ = addBenchCommand(command{name: "simulate", summary: "…", run: runBenchSimulate})
var benchCommands []command

// addBenchCommand registers a bench subcommand; a duplicate name panics at
// start-up. It returns true so it can initialize a package-level var.
func addBenchCommand(c command) bool {
	for _, b := range benchCommands {
		if b.name == c.name {
			panic("llmesh: duplicate bench command " + c.name)
		}
	}
	benchCommands = append(benchCommands, c)
	return true
}

var (
	_ = addBenchCommand(command{name: "run", summary: "run a workload (file or quick flags) against a target", run: runBenchRun})
	_ = addBenchCommand(command{name: "report", summary: "re-render a saved JSON report (table, json, markdown, html)", run: runBenchReport})
)

// benchOutputs are the report destinations shared by run, ab and sweep.
type benchOutputs struct {
	json, jsonl, html, markdown, format string
	sloGate                             bool
}

func (o *benchOutputs) register(fs *flag.FlagSet) {
	fs.StringVar(&o.json, "json", "", "write the JSON report to `FILE` (- for stdout)")
	fs.StringVar(&o.jsonl, "jsonl", "", "write one JSON record per request to `FILE`")
	fs.StringVar(&o.html, "html", "", "write the self-contained HTML report to `FILE`")
	fs.StringVar(&o.markdown, "markdown", "", "write the Markdown report to `FILE`")
	fs.StringVar(&o.format, "format", "table", "stdout format: table, json, markdown, html")
	fs.BoolVar(&o.sloGate, "slo-gate", false, "exit 3 when a class misses its attainment target (4 when the run is invalid)")
}

// writeFile writes with render to path ("-" is stdout).
func writeFile(path string, stdout io.Writer, render func(io.Writer) error) error {
	if path == "-" {
		return render(stdout)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := render(f); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	return f.Close()
}

// emit writes rep everywhere asked and applies the SLO gate.
func (o *benchOutputs) emit(rep *result.Report, stdout io.Writer) error {
	var errs []error
	if o.json != "-" {
		if err := report.Render(stdout, rep, o.format); err != nil {
			errs = append(errs, err)
		}
	}
	for _, f := range []struct{ path, format string }{{o.json, "json"}, {o.html, "html"}, {o.markdown, "markdown"}} {
		if f.path == "" {
			continue
		}
		if err := writeFile(f.path, stdout, func(w io.Writer) error { return report.Render(w, rep, f.format) }); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if o.sloGate {
		return gateExit(harness.Gate(rep))
	}
	return nil
}

func gateExit(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, harness.ErrInvalid):
		return withExitCode(harness.ExitInvalid, err)
	case errors.Is(err, harness.ErrSLOMissed):
		return withExitCode(harness.ExitSLO, err)
	}
	return err
}

// workloadFlags are the workload selection and quick-mode flags shared by
// run, ab and sweep.
type workloadFlags struct {
	file   string
	q      harness.Quick
	maxLag time.Duration
	trace  string
	format string
	speed  float64
	set    map[string]bool
}

// provenance starts a run's provenance: this build, the workload and trace
// files' hashes, the workload's seed, and the host now (before the run).
func (wf *workloadFlags) provenance(w *workload.Workload) (*provenance.Provenance, error) {
	p := provenance.New()
	if err := p.AddFile("workload "+wf.file, wf.file); err != nil {
		return nil, err
	}
	if err := p.AddFile("trace "+wf.trace, wf.trace); err != nil {
		return nil, err
	}
	p.Seeds = []int64{w.Spec.Seed}
	return p, nil
}

func (wf *workloadFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&wf.file, "workload", "", "workload YAML `FILE` (else a one-class workload from the quick flags)")
	fs.StringVar(&wf.q.Protocol, "protocol", workload.ProtocolCompletions, "openai-completions, openai-chat, grpc-llm-v1 or grpc-vllm")
	fs.StringVar(&wf.q.Model, "model", "", "model name sent with requests")
	fs.Float64Var(&wf.q.Rate, "rate", 0, "requests per second (open loop)")
	fs.StringVar(&wf.q.Arrival, "arrival", "poisson", "arrival process for --rate: constant, poisson or gamma")
	fs.Float64Var(&wf.q.Burstiness, "burstiness", 1, "gamma shape (1 = Poisson, lower = burstier)")
	fs.IntVar(&wf.q.Concurrency, "concurrency", 0, "closed loop with `N` clients (instead of --rate)")
	fs.DurationVar(&wf.q.Duration, "duration", 0, "measured duration")
	fs.IntVar(&wf.q.Requests, "requests", 0, "measured request count")
	fs.DurationVar(&wf.q.Warmup, "warmup", 0, "warm-up duration excluded from statistics")
	fs.IntVar(&wf.q.PromptTokens, "prompt-tokens", 128, "prompt length in tokens")
	fs.IntVar(&wf.q.MaxTokens, "max-tokens", 128, "output length in tokens (sent as max_tokens with ignore_eos)")
	fs.Int64Var(&wf.q.Seed, "seed", 0, "random seed (default: the workload's, else 1)")
	fs.DurationVar(&wf.q.TTFTSLO, "ttft-slo", 0, "TTFT SLO of the quick class")
	fs.DurationVar(&wf.q.TPOTSLO, "tpot-slo", 0, "TPOT SLO of the quick class")
	fs.StringVar(&wf.trace, "trace", "", "replay trace `FILE` (Azure CSV or Mooncake JSON lines): arrivals and lengths from it, classes by the workload's shares; a Mooncake trace's prompts share tokens where its hash_ids agree")
	fs.StringVar(&wf.format, "trace-format", "", "trace format: azure or mooncake (default: detected from the file)")
	fs.Float64Var(&wf.speed, "trace-speed", 1, "replay the trace `S` times faster (its inter-arrival times divided by S), e.g. against engines run with llmesh sim --time-scale S")
	fs.DurationVar(&wf.maxLag, "max-lag", 0, "absolute budget for the schedule-lag p99, replacing the relative one (schedule_lag_fraction of the smallest TTFT SLO, TTFT P50 or arrival gap); 0: relative")
}

// load builds the workload: the file with explicitly set flags overriding
// it, or the quick spec.
func (wf *workloadFlags) load(fs *flag.FlagSet) (*workload.Workload, error) {
	w, err := wf.loadSpec(fs)
	if err != nil {
		return nil, err
	}
	if wf.set["trace-speed"] {
		if wf.trace == "" {
			return nil, errors.New("--trace-speed: only with --trace")
		}
		if !(wf.speed > 0) || wf.speed > 1e6 {
			return nil, fmt.Errorf("--trace-speed: %v must be in (0, 1e6]", wf.speed)
		}
	}
	if wf.trace == "" {
		return w, nil
	}
	if _, err := trace.ParseFormat(wf.format); err != nil {
		return nil, fmt.Errorf("--trace-format: %w", err)
	}
	if wf.set["rate"] || wf.set["concurrency"] {
		return nil, errors.New("--trace: not with --rate or --concurrency (the trace sets the arrivals)")
	}
	w, err = w.WithTraceFile(wf.trace, trace.Format(wf.format))
	if err != nil {
		return nil, fmt.Errorf("--trace: %w", err)
	}
	if wf.speed != 1 {
		w = w.ScaleRate(wf.speed)
	}
	return w, nil
}

func (wf *workloadFlags) loadSpec(fs *flag.FlagSet) (*workload.Workload, error) {
	wf.set = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { wf.set[f.Name] = true })
	if wf.file == "" {
		q := wf.q
		if wf.trace != "" {
			// The trace gives the arrivals and lengths; the quick spec
			// only names the class, and its length bounds the run.
			q.Rate, q.Concurrency = 1, 0
			if q.Duration == 0 && q.Requests == 0 {
				q.Requests = workload.MaxRequests
			}
		}
		s := harness.QuickSpec(q)
		if wf.set["max-lag"] {
			s.MaxScheduleLagP99 = workload.Duration(wf.maxLag)
		}
		return workload.Compile(s, workload.CompileOptions{})
	}
	w, err := workload.LoadFile(wf.file)
	if err != nil {
		return nil, err
	}
	s := w.Spec
	if wf.set["protocol"] {
		s.Protocol = wf.q.Protocol
	}
	if wf.set["model"] {
		s.Model = wf.q.Model
	}
	if wf.set["rate"] {
		s.Arrival.Rate = wf.q.Rate
	}
	if wf.set["duration"] {
		s.Duration = workload.Duration(wf.q.Duration)
	}
	if wf.set["requests"] {
		s.Requests = wf.q.Requests
	}
	if wf.set["seed"] {
		s.Seed = wf.q.Seed
	}
	if wf.set["warmup"] {
		s.Warmup.Duration = workload.Duration(wf.q.Warmup)
	}
	if wf.set["max-lag"] {
		s.MaxScheduleLagP99 = workload.Duration(wf.maxLag)
	}
	dir := "."
	if i := strings.LastIndexAny(wf.file, `/\`); i >= 0 {
		dir = wf.file[:i]
	}
	w2, err := workload.Compile(&s, workload.CompileOptions{BaseDir: dir})
	if err != nil {
		return nil, fmt.Errorf("%s (with flag overrides): %w", wf.file, err)
	}
	return w2, nil
}

func runBenchRun(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("llmesh bench run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		wf                     workloadFlags
		out                    benchOutputs
		target, label, pol     string
		gpuOn, detailed, quiet bool
	)
	wf.register(fs)
	out.register(fs)
	fs.StringVar(&target, "target", "", "endpoint: http://host:port for OpenAI protocols, host:port for gRPC (required)")
	fs.StringVar(&label, "label", "", "label recorded in the report")
	fs.StringVar(&pol, "policy", "", "scheduling policy name recorded in the report")
	fs.BoolVar(&gpuOn, "gpu", false, "sample NVIDIA GPU telemetry (NVML) during the run")
	fs.BoolVar(&detailed, "detailed", false, "include per-request arrays in the JSON report (vLLM --save-detailed)")
	fs.BoolVar(&quiet, "quiet", false, "no live progress")
	var primaries stringList
	fs.Var(&primaries, "primary", "record `CLASS=METRIC` as the class's primary metric, which bench compare of this report judges by (replaces the workload's primary:); repeatable")
	var engineMetrics string
	fs.StringVar(&engineMetrics, "engine-metrics", "", "comma-separated `URLS` of the engines' /metrics: report how much their prefix-cache counters moved during the run")
	if err := fs.Parse(args); err != nil {
		return withExitCode(harness.ExitUsage, err)
	}
	var errs []error
	if target == "" {
		errs = append(errs, errors.New("--target: required"))
	}
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected arguments %q", fs.Args()))
	}
	if !slices.Contains(report.Formats, out.format) {
		errs = append(errs, fmt.Errorf("--format: %q must be one of %s", out.format, strings.Join(report.Formats, ", ")))
	}
	flagged, perrs := parsePrimaryFlags(primaries)
	errs = append(errs, perrs...)
	w, err := wf.load(fs)
	if err != nil {
		errs = append(errs, err)
	}
	var primary map[string]string
	var primaryFrom string
	if w != nil && len(perrs) == 0 {
		if primary, primaryFrom, err = runPrimary(flagged, w, wf.file); err != nil {
			errs = append(errs, err)
		}
	}
	var metricsURLs []string
	for _, u := range strings.Split(engineMetrics, ",") {
		if u = strings.TrimSpace(u); u == "" {
			continue
		}
		if pu, err := url.Parse(u); err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
			errs = append(errs, fmt.Errorf("--engine-metrics: %q must be an http:// or https:// URL", u))
			continue
		}
		metricsURLs = append(metricsURLs, u)
	}
	if err := errors.Join(errs...); err != nil {
		return withExitCode(harness.ExitUsage, err)
	}
	o := harness.Options{Workload: w, Target: target, Label: label, Policy: pol, GPU: gpuOn, Detailed: detailed, EngineMetrics: metricsURLs}
	if !quiet && progress.IsTerminal(stdout) {
		o.Progress = stderr
	}
	var jf *os.File
	if out.jsonl != "" {
		if jf, err = os.Create(out.jsonl); err != nil {
			return err
		}
		defer jf.Close()
		o.JSONL = jf
	}
	prov, err := wf.provenance(w)
	if err != nil {
		return err
	}
	rep, recs, runErr := harness.Run(ctx, o)
	if rep == nil {
		return runErr
	}
	rep.Provenance = prov
	rep.Primary, rep.PrimaryFrom = primary, primaryFrom
	if err := out.emit(rep, stdout); err != nil {
		return errors.Join(runErr, err)
	}
	if runErr != nil {
		return runErr
	}
	if rep.Completed == 0 && rep.NumPrompts > 0 {
		return fmt.Errorf("no request completed (%d failed); first error: %s", rep.Failed, firstError(recs))
	}
	return nil
}

// firstError is the first measured failure's message.
func firstError(recs []result.Record) string {
	for _, r := range recs {
		if r.Error != "" {
			return r.Error
		}
	}
	return "none recorded"
}

func runBenchReport(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("llmesh bench report", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		out                           benchOutputs
		records, workloadFile, target string
		runID                         string
	)
	out.register(fs)
	fs.StringVar(&records, "records", "", "summarize a --jsonl `FILE` of per-request records instead (needs --workload)")
	fs.StringVar(&workloadFile, "workload", "", "workload `FILE` the records came from (classes, SLOs, targets)")
	fs.StringVar(&target, "target", "", "target recorded in a report rebuilt from --records")
	fs.StringVar(&runID, "run", "", "with --records from bench ab or sweep: the `RUN` to summarize (A/1, B/2, rate=5, …)")
	// Flags may follow the file name.
	var files []string
	rest := args
	for {
		if err := fs.Parse(rest); err != nil {
			return withExitCode(harness.ExitUsage, err)
		}
		if fs.NArg() == 0 {
			break
		}
		files = append(files, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	var errs []error
	switch {
	case records != "" && (len(files) != 0 || workloadFile == ""):
		errs = append(errs, errors.New("--records: takes no report file and needs --workload"))
	case records == "" && len(files) == 2:
		errs = append(errs, fmt.Errorf("want exactly one report file, got 2: to compare two results, run `llmesh bench compare %s %s`", files[0], files[1]))
	case records == "" && len(files) != 1:
		errs = append(errs, fmt.Errorf("want exactly one report file, got %d", len(files)))
	case records == "" && runID != "":
		errs = append(errs, errors.New("--run: only with --records"))
	}
	if !slices.Contains(report.Formats, out.format) {
		errs = append(errs, fmt.Errorf("--format: %q must be one of %s", out.format, strings.Join(report.Formats, ", ")))
	}
	if err := errors.Join(errs...); err != nil {
		return withExitCode(harness.ExitUsage, err)
	}
	if records != "" {
		return reportFromRecords(records, workloadFile, target, runID, &out, stdout)
	}
	f, err := os.Open(files[0])
	if err != nil {
		return err
	}
	defer f.Close()
	rep, err := report.ReadJSON(f)
	if err != nil {
		return fmt.Errorf("%s: %w", files[0], err)
	}
	return out.emit(rep, stdout)
}

// reportFromRecords rebuilds a report from a JSONL export, for example of
// a run that was killed before it could write its report. A malformed line
// stops reading; the records before it are still summarized.
func reportFromRecords(path, workloadFile, target, runID string, out *benchOutputs, stdout io.Writer) error {
	w, err := workload.LoadFile(workloadFile)
	if err != nil {
		return withExitCode(harness.ExitUsage, err)
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	recs, readErr := result.ReadRecords(f)
	if readErr != nil {
		readErr = fmt.Errorf("%s: %w (summarizing the %d records before it)", path, readErr, len(recs))
	}
	recs, err = pickRun(recs, runID)
	if err != nil {
		return errors.Join(readErr, withExitCode(harness.ExitUsage, fmt.Errorf("%s: %w", path, err)))
	}
	if len(recs) == 0 {
		return errors.Join(readErr, fmt.Errorf("%s: no records", path))
	}
	rep := stats.Summarize(recs, stats.Meta{Workload: w, Target: target})
	// The rebuilt report records the workload's primary, as bench run's would
	// have (unless that run was given --primary, which the records do not keep).
	if p := w.Spec.Primary(); len(p) > 0 {
		rep.Primary, rep.PrimaryFrom = p, workloadPrimaryFrom(workloadFile)
	}
	return errors.Join(out.emit(rep, stdout), readErr)
}

// pickRun keeps the records of run id. The export of bench ab or sweep
// holds several runs, which are never summarized together: without an id
// such a file is an error that lists its runs.
func pickRun(recs []result.Record, id string) ([]result.Record, error) {
	var runs []string
	seen := map[string]bool{}
	var out []result.Record
	for _, r := range recs {
		if !seen[r.Run] {
			seen[r.Run] = true
			runs = append(runs, r.Run)
		}
		if r.Run == id {
			out = append(out, r)
		}
	}
	switch {
	case id == "" && len(runs) == 1:
		return recs, nil
	case id == "" && len(runs) > 1:
		return nil, fmt.Errorf("records of %d runs (%s): pick one with --run", len(runs), strings.Join(runs, ", "))
	case id != "" && !seen[id]:
		return nil, fmt.Errorf("--run: no records of run %q (runs: %s)", id, strings.Join(runs, ", "))
	}
	return out, nil
}

// writeJSON writes v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
