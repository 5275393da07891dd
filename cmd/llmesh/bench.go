package main

import (
	"context"
	"fmt"
	"io"
	"sort"
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

// runBench dispatches `llmesh bench <sub>`.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		benchUsage(stdout)
		return nil
	}
	for _, c := range benchCommands {
		if c.name == args[0] {
			return c.run(ctx, args[1:], stdout, stderr)
		}
	}
	benchUsage(stderr)
	return withExitCode(2, fmt.Errorf("bench: unknown subcommand %q", args[0]))
}

func benchUsage(w io.Writer) {
	fmt.Fprintln(w, "Usage: llmesh bench <subcommand> [flags]   (llmesh bench <subcommand> -h for its flags)")
	fmt.Fprintln(w, "\nSubcommands:")
	cs := append([]command(nil), benchCommands...)
	sort.Slice(cs, func(i, j int) bool { return cs[i].name < cs[j].name })
	for _, c := range cs {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nExit codes: 0 ok, 1 error, 2 usage, 3 SLO gate failed (--slo-gate), 4 run invalid (schedule lag).")
}
