// Command llmesh is the single binary of llmesh: the demo, the embedded
// gateway, the xDS control plane, the shared scheduler, the simulated engine
// and the benchmark harness. Each subcommand lives in its own file of this
// package and is listed once in commands below.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
)

// command is one subcommand. run gets the arguments after the subcommand's
// name and returns an error to print; errors wrapping exitCode set the
// process exit status.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// commands is the one registry of subcommands.
var commands = []command{
	{"demo", "the whole product on loopback: sim + gateway + control, fifo vs preemptive A/B, SLO report", runDemo},
	{"bench", "benchmark harness: run, ab, sweep, report", runBench},
	{"control", "xDS control plane for Envoy: control --config mesh.yaml --xds ADDR --admin ADDR", runControl},
	{"gateway", "embedded gateway: measure, relocate and schedule LLM traffic to engines", runGateway},
	{"report", "live SLO report from Prometheus: report slo --prometheus URL --config mesh.yaml --window 24h", runReport},
	{"scheduler", "shared scheduler service: scheduler serve --listen ADDR --config mesh.yaml", runScheduler},
	{"sim", "simulated LLM engine (OpenAI HTTP + gRPC), calibrated to H200 timings", runSim},
	{"slo", "Prometheus rules and Grafana dashboard from the mesh config: slo rules|dashboard --config mesh.yaml", runSLO},
}

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
	code := 1
	var ec *exitCode
	if errors.As(err, &ec) {
		code = ec.code
	}
	if ec == nil || ec.err != nil {
		fmt.Fprintln(os.Stderr, "llmesh:", err)
	}
	os.Exit(code)
}

// Main runs the subcommand named by args[0].
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(stdout)
		return nil
	}
	seen := map[string]bool{}
	for _, c := range commands {
		if seen[c.name] {
			panic("llmesh: duplicate command " + c.name)
		}
		seen[c.name] = true
	}
	for _, c := range commands {
		if c.name == args[0] {
			return c.run(ctx, args[1:], stdout, stderr)
		}
	}
	usage(stderr)
	return withExitCode(2, fmt.Errorf("unknown command %q", args[0]))
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "llmesh — measure, relocate and schedule LLM traffic.")
	fmt.Fprintln(w, "\nUsage: llmesh <command> [flags]   (llmesh <command> -h for its flags)")
	fmt.Fprintln(w, "\nCommands:")
	cs := append([]command(nil), commands...)
	sort.Slice(cs, func(i, j int) bool { return cs[i].name < cs[j].name })
	for _, c := range cs {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, strings.TrimSpace(`
Start with: llmesh demo`))
}
