package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/llmesh/llmesh/sim"
)

// runSim is `llmesh sim`: the simulated engine's servers, or its timing
// model's `predict` and `fit-report` subcommands.
func runSim(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 {
		switch args[0] {
		case "predict":
			return runSimPredict(args[1:], stdout, stderr)
		case "fit-report":
			return runSimFitReport(args[1:], stdout, stderr)
		}
	}
	return runSimServe(ctx, args, stdout, stderr)
}

func runSimPredict(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sim predict", flag.ContinueOnError)
	fs.SetOutput(stderr)
	profile := fs.String("profile", sim.DefaultProfile, "profile: "+strings.Join(sim.Profiles(), ", "))
	prefill := fs.Int("prefill", 0, "prompt tokens of one prefill (may be combined with a decode batch: a mixed step)")
	batch := fs.Int("decode-batch", 0, "sequences in one decode step")
	ctxLen := fs.Int("context", 0, "context tokens of each decoding sequence")
	asJSON := fs.Bool("json", false, "print one JSON object with a numeric ms field")
	if err := fs.Parse(args); err != nil {
		return withExitCode(2, nil)
	}
	var errs []error
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected arguments: %q", fs.Args()))
	}
	if *prefill < 0 {
		errs = append(errs, fmt.Errorf("--prefill: %d must not be negative", *prefill))
	}
	if *batch < 0 {
		errs = append(errs, fmt.Errorf("--decode-batch: %d must not be negative", *batch))
	}
	if *ctxLen < 0 {
		errs = append(errs, fmt.Errorf("--context: %d must not be negative", *ctxLen))
	}
	if *prefill == 0 && *batch == 0 {
		errs = append(errs, errors.New("give --prefill T, or --decode-batch B --context C, or both"))
	}
	if *batch > 0 && *ctxLen == 0 {
		errs = append(errs, errors.New("--context: required with --decode-batch"))
	}
	if *ctxLen > 0 && *batch == 0 {
		errs = append(errs, errors.New("--decode-batch: required with --context"))
	}
	p, err := sim.LookupProfile(*profile)
	if err != nil {
		errs = append(errs, fmt.Errorf("--profile: %w", err))
	}
	if err := errors.Join(errs...); err != nil {
		return withExitCode(2, err)
	}
	if *prefill+*ctxLen >= p.MaxContext*4 || *batch > 1<<20 {
		return withExitCode(2, fmt.Errorf("step too large for %s (context %d tokens)", p.Name, p.MaxContext))
	}
	d := p.Timing.Predict(*prefill, *batch, *ctxLen)
	ms := float64(d.Nanoseconds()) / 1e6
	if *asJSON {
		out := map[string]any{"profile": p.Name, "ms": ms}
		if *prefill > 0 {
			out["prefill_tokens"] = *prefill
		}
		if *batch > 0 {
			out["decode_batch"] = *batch
			out["context"] = *ctxLen
			out["decode_tok_s"] = float64(*batch) / (ms / 1e3)
		}
		return json.NewEncoder(stdout).Encode(out)
	}
	var parts []string
	if *prefill > 0 {
		parts = append(parts, fmt.Sprintf("prefill of %d tokens", *prefill))
	}
	if *batch > 0 {
		parts = append(parts, fmt.Sprintf("decode of %d sequences at context %d", *batch, *ctxLen))
	}
	_, err = fmt.Fprintf(stdout, "%s: %s: %.3f ms\n", p.Name, strings.Join(parts, " + "), ms)
	return err
}

func runSimFitReport(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sim fit-report", flag.ContinueOnError)
	fs.SetOutput(stderr)
	verbose := fs.Bool("v", false, "list every calibration point with the model's prediction")
	asJSON := fs.Bool("json", false, "print per-profile statistics as JSON")
	if err := fs.Parse(args); err != nil {
		return withExitCode(2, nil)
	}
	if fs.NArg() > 0 {
		return withExitCode(2, fmt.Errorf("unexpected arguments: %q", fs.Args()))
	}
	fit, err := sim.BuiltinFit()
	if err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(fit.Stats())
	}
	return fit.WriteReport(stdout, *verbose)
}

func runSimServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return withExitCode(2, errors.New("sim: servers not built yet"))
}
