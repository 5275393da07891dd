package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/llmesh/llmesh/bench/workload"
	"github.com/llmesh/llmesh/cmd/llmesh/demo"
	"github.com/llmesh/llmesh/cmd/llmesh/internal/flag"
)

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("llmesh demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, `Starts the simulated engine, the embedded gateway and the xDS control plane on
loopback, runs the standard mixed-priority workload under fifo and preemptive
scheduling as an interleaved A/B, prints the per-class SLO tables and the
verdict, and writes report.html, report.md, ab.json, per-run JSON reports and
per-request JSONL to DIR.`)
		fs.PrintDefaults()
	}
	quick := fs.Bool("quick", false, "one short A/B pair (about 45 s) instead of the full demo (about 4 min)")
	out := fs.String("out", "llmesh-demo-out", "output directory")
	wl := fs.String("workload", "", "workload file (default: the built-in mixed-priority workload)")
	repeats := fs.Int("repeats", 0, "A/B pairs (default 3, or 1 with --quick)")
	dur := fs.Duration("duration", 0, "measured length of each run (default 20s, or 10s with --quick)")
	a := fs.String("a", "fifo", "policy of arm A (the baseline)")
	b := fs.String("b", "preemptive", "policy of arm B (the candidate)")
	maxInflight := fs.Int("max-inflight", 64, "upper bound of the gateway's admissions to the engine")
	prefill := fs.Int("max-prefill-tokens", 0, "both arms' pools: most prompt tokens admitted but not yet prefilled for every class but the most urgent (0: no bound)")
	reserve := fs.Int("reserve-urgent", 0, "both arms' pools: slots only the most urgent class may take (0: none)")
	maxLag := fs.Duration("max-lag", 0, "absolute budget for each run's schedule-lag p99, replacing the relative one (a run over it is invalid); 0: the workload's")
	retries := fs.Int("retries", 1, "run a pair with an invalid run again, up to `N` times, before keeping it (the report lists every retry)")
	load := fs.Float64("load", demo.DefaultLoad, "arrival rate as a multiple of the workload's saturation rate on the simulated engine (measured first in virtual time); negative: the workload's own rate")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return withExitCode(2, err)
	}
	var errs []error
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected arguments: %q", fs.Args()))
	}
	if *repeats < 0 {
		errs = append(errs, fmt.Errorf("--repeats: %d must not be negative", *repeats))
	}
	if *dur < 0 {
		errs = append(errs, fmt.Errorf("--duration: %s must not be negative", *dur))
	}
	if *maxLag < 0 {
		errs = append(errs, fmt.Errorf("--max-lag: %s must not be negative", *maxLag))
	}
	if *retries < 0 || *retries > 10 {
		errs = append(errs, fmt.Errorf("--retries: %d must be in [0, 10]", *retries))
	}
	if *load == 0 {
		errs = append(errs, fmt.Errorf("--load: must not be 0"))
	}
	if *prefill < 0 {
		errs = append(errs, fmt.Errorf("--max-prefill-tokens: %d must not be negative", *prefill))
	}
	if *reserve < 0 || *reserve >= *maxInflight {
		errs = append(errs, fmt.Errorf("--reserve-urgent: %d must be in [0, --max-inflight)", *reserve))
	}
	if *maxInflight < 1 {
		errs = append(errs, fmt.Errorf("--max-inflight: %d must be at least 1", *maxInflight))
	}
	o := demo.Options{OutDir: *out, Quick: *quick, Repeats: *repeats, Duration: *dur, A: *a, B: *b,
		MaxInflight: *maxInflight, Load: *load, MaxLag: *maxLag, Retries: *retries, Stdout: stdout, Stderr: stderr,
		Bounds: demo.Bounds{MaxPrefillTokens: *prefill, ReserveUrgent: *reserve}, Gateway: stackGateway}
	if *wl != "" {
		w, err := workload.LoadFile(*wl)
		if err != nil {
			errs = append(errs, fmt.Errorf("--workload: %w", err))
		}
		o.Workload = w
	}
	// The arms are checked with the rest of the flags, before the demo
	// writes anything to --out.
	if len(errs) == 0 {
		for _, arm := range []struct{ flag, policy string }{{"--a", *a}, {"--b", *b}} {
			if err := o.CheckArm(arm.policy); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", arm.flag, err))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return withExitCode(2, err)
	}
	res, err := demo.Run(ctx, o)
	if err == nil && res != nil && res.AB != nil && !res.AB.Valid {
		return withExitCode(exitInvalid, errors.New(res.AB.Verdict))
	}
	return err
}
