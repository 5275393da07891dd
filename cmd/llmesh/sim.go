package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/llmesh/llmesh/clock"
	"github.com/llmesh/llmesh/cmd/llmesh/internal/flag"
	"github.com/llmesh/llmesh/kvevents"
	"github.com/llmesh/llmesh/sim"
	"github.com/llmesh/llmesh/sim/server"
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
	model := fs.String("model", "", "same as --profile")
	prefill := fs.Int("prefill", 0, "prompt tokens of one prefill (may be combined with a decode batch: a mixed step)")
	cached := fs.Int("cached", 0, "tokens of the prefill's sequence already in the KV cache (a prefix-cache hit); needs --prefill")
	batch := fs.Int("decode-batch", 0, "sequences in one decode step")
	ctxLen := fs.Int("context", 0, "context tokens of each decoding sequence")
	jsonOut := fs.String("json", "", "write one JSON object with a numeric ms field to `FILE` (- for stdout)")
	if err := fs.Parse(args); err != nil {
		return withExitCode(2, nil)
	}
	var errs []error
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected arguments: %q", fs.Args()))
	}
	profileSet := false
	fs.Visit(func(f *flag.Flag) { profileSet = profileSet || f.Name == "profile" })
	if *model != "" {
		if profileSet && *model != *profile {
			errs = append(errs, fmt.Errorf("--model: %q disagrees with --profile %q (give one)", *model, *profile))
		}
		*profile = *model
	}
	if *prefill < 0 {
		errs = append(errs, fmt.Errorf("--prefill: %d must not be negative", *prefill))
	}
	if *cached < 0 {
		errs = append(errs, fmt.Errorf("--cached: %d must not be negative", *cached))
	}
	if *cached > 0 && *prefill == 0 {
		errs = append(errs, errors.New("--cached: needs --prefill T (the new tokens computed after the cached ones)"))
	}
	if *batch < 0 {
		errs = append(errs, fmt.Errorf("--decode-batch: %d must not be negative", *batch))
	}
	if *ctxLen < 0 {
		errs = append(errs, fmt.Errorf("--context: %d must not be negative", *ctxLen))
	}
	if *prefill == 0 && *batch == 0 && *cached == 0 {
		errs = append(errs, errors.New("give --prefill T [--cached C], or --decode-batch B --context C, or both"))
	}
	if *batch > 0 && *ctxLen == 0 {
		errs = append(errs, errors.New("--context: required with --decode-batch"))
	}
	if *ctxLen > 0 && *batch == 0 {
		errs = append(errs, errors.New("--decode-batch: required with --context"))
	}
	p, err := sim.LookupProfile(*profile)
	if err != nil {
		name := "--profile"
		if *model != "" {
			name = "--model"
		}
		errs = append(errs, fmt.Errorf("%s: %w", name, err))
	}
	if err := errors.Join(errs...); err != nil {
		return withExitCode(2, err)
	}
	if *prefill+*cached+*ctxLen >= p.MaxContext*4 || *batch > 1<<20 {
		return withExitCode(2, fmt.Errorf("step too large for %s (context %d tokens)", p.Name, p.MaxContext))
	}
	d := p.Timing.PredictStep(*prefill, *cached, *batch, *ctxLen)
	ms := float64(d.Nanoseconds()) / 1e6
	if *jsonOut != "" {
		out := map[string]any{"profile": p.Name, "ms": ms}
		if *prefill > 0 {
			out["prefill_tokens"] = *prefill
			out["cached_tokens"] = *cached
		}
		if *batch > 0 {
			out["decode_batch"] = *batch
			out["context"] = *ctxLen
			out["decode_tok_s"] = float64(*batch) / (ms / 1e3)
		}
		return writeFile(*jsonOut, stdout, func(w io.Writer) error { return json.NewEncoder(w).Encode(out) })
	}
	var parts []string
	if *prefill > 0 {
		part := fmt.Sprintf("prefill of %d tokens", *prefill)
		if *cached > 0 {
			part += fmt.Sprintf(" after %d cached", *cached)
		}
		parts = append(parts, part)
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
	jsonOut := fs.String("json", "", "write per-profile statistics as JSON to `FILE` (- for stdout)")
	search := fs.Bool("search", false, "search the roofline shape on its grid again instead of using the built-in one")
	check := fs.String("check", "", "score the model on the points of this calibration file instead (e.g. sim/calibration/holdout-h200.jsonl)")
	if err := fs.Parse(args); err != nil {
		return withExitCode(2, nil)
	}
	if fs.NArg() > 0 {
		return withExitCode(2, fmt.Errorf("unexpected arguments: %q", fs.Args()))
	}
	fit, err := sim.BuiltinFit()
	if err == nil && *search {
		var cal *sim.Calibration
		if cal, err = sim.ParseCalibration(sim.CalibrationH200()); err == nil {
			fit, err = sim.SearchRoofline(cal)
		}
	}
	if err == nil && *check != "" {
		var data []byte
		if data, err = os.ReadFile(*check); err == nil {
			var cal *sim.Calibration
			if cal, err = sim.ParseCalibration(data); err == nil {
				fit = fit.Evaluate(cal)
			}
		}
		if err != nil {
			err = withExitCode(2, fmt.Errorf("--check: %w", err))
		}
	}
	if err != nil {
		return err
	}
	if *jsonOut != "" {
		return writeFile(*jsonOut, stdout, func(w io.Writer) error { return json.NewEncoder(w).Encode(fit.Stats()) })
	}
	return fit.WriteReport(stdout, *verbose)
}

func runSimServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:8000", "OpenAI-compatible HTTP listen address")
	grpcListen := fs.String("grpc-listen", "", "gRPC listen address (llm.v1.Generation, vllm.grpc.engine.VllmEngine); empty: none")
	profile := fs.String("profile", sim.DefaultProfile, "profile: "+strings.Join(sim.Profiles(), ", "))
	served := fs.String("served-model-name", "", "model name clients use (default: the profile name)")
	maxSeqs := fs.Int("max-num-seqs", 256, "most running sequences per step")
	maxTokens := fs.Int("max-num-batched-tokens", 8192, "most tokens per step (prefill chunks + decodes)")
	longPrefill := fs.Int("long-prefill-token-threshold", 0, "most prefill tokens of one sequence per step, as vLLM's --long-prefill-token-threshold (0: no cap)")
	kvTokens := fs.Int("kv-cache-tokens", 0, "KV cache capacity in tokens (0: the profile's H200 default)")
	maxLen := fs.Int("max-model-len", 0, "most prompt+output tokens per sequence (0: the profile's context)")
	policy := fs.String("scheduling-policy", "fcfs", "waiting queue order: fcfs or priority (lower value first)")
	scale := fs.Float64("time-scale", 1, "run the engine clock this many times faster than real time")
	seed := fs.Uint64("seed", 0, "seed of the synthetic tokens and of random faults")
	faultRate := fs.Float64("fault-rate", 0, "share of requests that fail on purpose, in [0, 1]")
	faultKinds := fs.String("fault-kinds", "429,500,503,invalid", "faults drawn at --fault-rate: 429, 500, 503, invalid, drop-after=N, stall=DURATION")
	defMax := fs.Int("default-max-tokens", 16, "max_tokens of requests that give none")
	caching := true
	fs.Var(prefixCachingFlag{&caching, true}, "enable-prefix-caching", "keep computed KV blocks and serve repeated prompt prefixes from them, as vLLM V1 does")
	fs.Var(prefixCachingFlag{&caching, false}, "no-enable-prefix-caching", "turn prefix caching off (the later of the two flags wins)")
	quirks := fs.String("quirks", "", "comma-separated engine quirks to reproduce: "+strings.Join(server.KnownQuirks(), ", "))
	kvEventsConfig := fs.String("kv-events-config", "", `publish KV-cache events as vLLM does, a JSON object: {"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:5557","topic":"kv-events"}`)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return withExitCode(2, nil)
	}
	var errs []error
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected arguments: %q", fs.Args()))
	}
	pol, err := sim.ParsePolicy(*policy)
	if err != nil {
		errs = append(errs, fmt.Errorf("--scheduling-policy: %w", err))
	}
	if *scale <= 0 || *scale > 1e6 {
		errs = append(errs, fmt.Errorf("--time-scale: %v must be in (0, 1e6]", *scale))
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"--max-num-seqs", *maxSeqs}, {"--max-num-batched-tokens", *maxTokens}, {"--default-max-tokens", *defMax}} {
		if f.v < 1 {
			errs = append(errs, fmt.Errorf("%s: %d must be at least 1", f.name, f.v))
		}
	}
	if *kvTokens < 0 {
		errs = append(errs, fmt.Errorf("--kv-cache-tokens: %d must not be negative", *kvTokens))
	}
	if *longPrefill < 0 {
		errs = append(errs, fmt.Errorf("--long-prefill-token-threshold: %d must not be negative", *longPrefill))
	}
	if *maxLen < 0 {
		errs = append(errs, fmt.Errorf("--max-model-len: %d must not be negative", *maxLen))
	}
	var kinds []string
	for _, k := range strings.Split(*faultKinds, ",") {
		if k = strings.TrimSpace(k); k != "" {
			kinds = append(kinds, k)
		}
	}
	if _, err := server.ParseQuirks([]string{*quirks}); err != nil {
		errs = append(errs, fmt.Errorf("--quirks: %w", err))
	}
	var kvc kvevents.Config
	if *kvEventsConfig != "" {
		if kvc, err = kvevents.ParseConfig(*kvEventsConfig); err != nil {
			errs = append(errs, fmt.Errorf("--kv-events-config: %w", err))
		}
	}
	var srv *server.Server
	var pub *kvevents.Publisher
	if err := errors.Join(errs...); err == nil && kvc.Publishes() {
		if pub, err = kvevents.NewPublisher(kvc); err != nil {
			errs = append(errs, fmt.Errorf("--kv-events-config: %w", err))
		} else {
			defer pub.Close()
		}
	}
	if err := errors.Join(errs...); err == nil {
		var kv server.KVEventPublisher
		if pub != nil {
			kv = pub
		}
		srv, err = server.New(server.Config{
			Profile: *profile, ServedModelName: *served, Seed: *seed,
			Engine: sim.Config{MaxNumSeqs: *maxSeqs, MaxNumBatchedTokens: *maxTokens, KVCacheTokens: *kvTokens, MaxModelLen: *maxLen, Policy: pol,
				LongPrefillTokenThreshold: *longPrefill, DisablePrefixCaching: !caching},
			Clock:     clock.NewScaled(*scale),
			FaultRate: *faultRate, FaultKinds: kinds, DefaultMaxTokens: *defMax,
			Quirks: []string{*quirks}, KVEvents: kv,
		})
		if err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return withExitCode(2, err)
	}
	// SIGHUP: the sim has no config file; it is logged and ignored
	// (subscribed before the addresses are printed).
	defer logHangups(slog.New(slog.NewTextHandler(stderr, nil)), "the sim has no config file; flags apply at start only")()
	hl, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	var gl net.Listener
	if *grpcListen != "" {
		if gl, err = net.Listen("tcp", *grpcListen); err != nil {
			hl.Close()
			return fmt.Errorf("--grpc-listen: %w", err)
		}
	}
	c := srv.Config()
	fmt.Fprintf(stdout, "llmesh sim: model %s, policy %s, max-num-seqs %d, max-num-batched-tokens %d, long-prefill-token-threshold %d, kv cache %d tokens, max-model-len %d, prefix caching %s, time-scale %g\n",
		c.ServedModelName, c.Engine.Policy, c.Engine.MaxNumSeqs, c.Engine.MaxNumBatchedTokens, c.Engine.LongPrefillTokenThreshold, c.Engine.KVCacheTokens, c.Engine.MaxModelLen, onOff(!c.Engine.DisablePrefixCaching), *scale)
	fmt.Fprintf(stdout, "llmesh sim: http on http://%s\n", hl.Addr())
	if gl != nil {
		fmt.Fprintf(stdout, "llmesh sim: grpc on %s\n", gl.Addr())
	}
	if strings.TrimSpace(*quirks) != "" {
		fmt.Fprintf(stdout, "llmesh sim: quirks %s\n", *quirks)
	}
	if pub != nil {
		where := kvc.Endpoint
		if a := pub.Addr(); a != nil {
			where = "tcp://" + a.String()
		}
		fmt.Fprintf(stdout, "llmesh sim: kv events on %s topic %q\n", where, kvc.Topic)
	}
	return srv.Serve(ctx, hl, gl)
}

// prefixCachingFlag is one of the pair --enable-prefix-caching and
// --no-enable-prefix-caching, which set one value as vLLM's boolean
// options do: the one given last wins.
type prefixCachingFlag struct {
	v    *bool
	sets bool // what the flag given as plain --name sets
}

func (f prefixCachingFlag) IsBoolFlag() bool { return true }

func (f prefixCachingFlag) String() string {
	if f.v == nil {
		return ""
	}
	return strconv.FormatBool(*f.v == f.sets)
}

func (f prefixCachingFlag) Set(s string) error {
	b, err := strconv.ParseBool(s)
	if err != nil {
		return fmt.Errorf("%q is not a boolean", s)
	}
	*f.v = b == f.sets
	return nil
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}
