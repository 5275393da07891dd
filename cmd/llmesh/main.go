// Command llmesh is the single binary of llmesh: the demo, the embedded
// gateway, the xDS control plane, the shared scheduler, the simulated engine
// and the benchmark harness. Each subcommand lives in its own file of this
// package and is listed once in commands below (bench subcommands join with
// addBenchCommand); cli.go turns the list into the cobra command tree.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/llmesh/llmesh/bench/harness"
)

// command is one subcommand. name is its path below llmesh: "demo", or
// "sim predict" for a subcommand of sim (a parent that has no entry of its
// own only groups its children). run gets the arguments after the name
// (its flags, which it defines and parses with a FlagSet of
// cmd/llmesh/internal/flag, so that the tree parses them) and returns an
// error to print; errors wrapping exitCode set the process exit status.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// commands is the one registry of subcommands.
var commands = []command{
	{"demo", "the whole product on loopback: sim + gateway + control, fifo vs preemptive A/B, SLO report", runDemo},
	{"bench", "benchmark harness: run, ab, sweep, simulate, report", nil},
	{"control", "xDS control plane for Envoy: control --config mesh.yaml --xds ADDR --admin ADDR", runControl},
	{"epp", "endpoint picker for Gateway API Inference Extension gateways over Envoy ext_proc: epp --config mesh.yaml --listen ADDR", runEPP},
	{"gateway", "embedded gateway: measure, relocate and schedule LLM traffic to engines", runGateway},
	{"report", "reports of a live mesh", nil},
	{"report slo", "live SLO report from Prometheus: --prometheus URL --config mesh.yaml --window 24h", runReportSLO},
	{"scheduler", "shared scheduler service", nil},
	{"scheduler serve", "serve the shared scheduler: --listen ADDR --config mesh.yaml", runSchedulerServe},
	{"scheduler bench", "load on a shared scheduler from client proxies: --target ADDR --config mesh.yaml --rate R|--inflight N", runSchedulerBench},
	{"sim", "simulated LLM engine (OpenAI HTTP + gRPC), calibrated to H200 timings", runSim},
	{"sim predict", "time of one prefill, decode or mixed step under a profile's timing model", runSimPredictCmd},
	{"sim fit-report", "how well the timing model fits the H200 calibration data", runSimFitReportCmd},
	{"slo", "Prometheus rules and Grafana dashboard generated from the mesh config's SLOs", nil},
	{"slo rules", "recording rules and burn-rate alerts: --config mesh.yaml [--out FILE]", runSLORules},
	{"slo dashboard", "Grafana dashboard, one row per class: --config mesh.yaml [--out FILE]", runSLODashboard},
	{"version", "print the version, commit and Go version of this binary", runVersion},
}

// Exit codes of every command (docs/cli.md).
const (
	exitError    = 1                   // an error while running: I/O, a failed target, interrupted
	exitUsage    = harness.ExitUsage   // 2: bad flags or arguments, an unknown command, a missing or invalid input file (every problem listed at once)
	exitSLO      = harness.ExitSLO     // 3: --slo-gate: a class missed its attainment target
	exitInvalid  = harness.ExitInvalid // 4: the run is invalid (harness lag) or the A/B inconclusive: no verdict
	exitCodeHelp = "Exit codes: 0 ok, 1 error, 2 usage (bad flags or input files), 3 SLO gate failed (--slo-gate), 4 invalid run or inconclusive A/B."
)

// exitCode is an error that carries a process exit status.
type exitCode struct {
	code int
	err  error
}

func (e *exitCode) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitCode) Unwrap() error { return e.err }

// withExitCode wraps err so that main exits with code.
func withExitCode(code int, err error) error { return &exitCode{code: code, err: err} }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err == nil {
		return
	}
	code := exitError
	var ec *exitCode
	if errors.As(err, &ec) {
		code = ec.code
	}
	if ec == nil || ec.err != nil {
		fmt.Fprintln(os.Stderr, "llmesh:", err)
	}
	os.Exit(code)
}

// Main runs the command named by args.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	root := newRoot(args, stdout, stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return nil
	}
	var r ran
	if errors.As(err, &r) {
		return r.err
	}
	var ec *exitCode
	if errors.As(err, &ec) {
		return err // a flag error or an unknown command, already explained
	}
	// cobra's own otherwise.
	return withExitCode(exitUsage, fmt.Errorf("%w; see llmesh --help", err))
}
