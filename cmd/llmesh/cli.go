package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"runtime"
	"runtime/debug"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/llmesh/llmesh/bench/harness"
	"github.com/llmesh/llmesh/cmd/llmesh/internal/flag"
	"github.com/llmesh/llmesh/config"
)

// The command tree is cobra's, and so is the flag parsing: every command
// keeps the signature func(ctx, args, stdout, stderr) error and defines its
// flags in its own function with the standard library's API, which
// cmd/llmesh/internal/flag provides over pflag. The tree learns a command's
// flags (flag.Describe), parses the command line with them, and runs the
// command with arguments that hand the checked command line to the
// command's own FlagSet (flag.Run). So help
// (llmesh COMMAND --help), shell completion and the flag errors (one line
// naming the flag, a did-you-mean, exit 2) come from the definitions.

// runFunc is a command's function.
type runFunc = func(ctx context.Context, args []string, stdout, stderr io.Writer) error

// newRoot builds the cobra tree from commands and benchCommands.
// args is the command line Main runs (the tree runs it too).
func newRoot(args []string, stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "llmesh",
		Short: "llmesh — measure, relocate and schedule LLM traffic",
		Long: "llmesh — measure, relocate and schedule LLM traffic.\n\n" +
			"Start with: llmesh demo\n\n" + exitCodeHelp,
		SilenceErrors: true,
		SilenceUsage:  true,
		// Without arguments: the help, exit 0; with an unknown command: a
		// usage error (cobra's own message spans several lines).
		Args: cobra.ArbitraryArgs,
		RunE: groupRun,
	}
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return withExitCode(exitUsage, flag.Explain(c.Flags(), c.CommandPath(), err))
	})
	root.CompletionOptions.HiddenDefaultCmd = false
	all := append([]command(nil), commands...)
	for _, b := range benchCommands {
		all = append(all, command{name: "bench " + b.name, summary: b.summary, run: b.run})
	}
	// Parents before children, so a parent's own entry is used for it.
	sort.SliceStable(all, func(i, j int) bool { return strings.Count(all[i].name, " ") < strings.Count(all[j].name, " ") })
	byPath := map[string]*cobra.Command{"": root}
	for _, c := range all {
		if _, dup := byPath[c.name]; dup {
			panic("llmesh: duplicate command " + c.name)
		}
		parentPath, name := "", c.name
		if i := strings.LastIndex(c.name, " "); i >= 0 {
			parentPath, name = c.name[:i], c.name[i+1:]
		}
		parent := byPath[parentPath]
		if parent == nil {
			panic("llmesh: command " + c.name + " has no parent entry " + parentPath)
		}
		cc := &cobra.Command{Use: name, Short: c.summary, Args: cobra.ArbitraryArgs}
		if c.run == nil {
			cc.RunE = groupRun
		} else {
			run := c.run
			if parentPath == "bench" || parentPath == "scheduler" {
				// The scheduler service, like the bench commands, allocates
				// for every message (harness.GCPercent says what it buys).
				run = tunedGC(run)
			}
			adapt(cc, c.run, run, args, stdout, stderr)
		}
		byPath[c.name] = cc
		parent.AddCommand(cc)
	}
	var paths []string
	for _, c := range all {
		if c.run != nil {
			paths = append(paths, "  llmesh "+c.name)
		}
	}
	sort.Strings(paths)
	root.Long += "\n\nEvery command (llmesh COMMAND --help for its flags):\n" + strings.Join(paths, "\n") +
		"\n  llmesh completion bash|zsh|fish|powershell"
	for _, c := range root.Commands() {
		c.SetUsageTemplate(root.UsageTemplate() + "\n" + exitCodeHelp + "\n")
	}
	strictHelp(root)
	return root
}

// groupRun is the run of the root and of a group: its help, or a usage
// error for an unknown subcommand.
func groupRun(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return unknownCommand(cmd, args[0])
	}
	return cmd.Help()
}

// unknownCommand is the usage error for word, which names no subcommand of
// cmd: one line, with the closest subcommands.
func unknownCommand(cmd *cobra.Command, word string) error {
	msg := fmt.Sprintf("unknown command %q for %q", word, cmd.CommandPath())
	cmd.SuggestionsMinimumDistance = 2 // cobra's default, which SuggestionsFor does not apply
	if s := cmd.SuggestionsFor(word); len(s) > 0 {
		msg += fmt.Sprintf(" (did you mean %s?)", strings.Join(s, " or "))
	}
	return withExitCode(exitUsage, fmt.Errorf("%s; see %s --help", msg, cmd.CommandPath()))
}

// strictHelp makes `llmesh help WORDS` that name no command a usage error
// (cobra's own help command prints the root's usage and exits 0).
func strictHelp(root *cobra.Command) {
	root.InitDefaultHelpCmd()
	for _, h := range root.Commands() {
		if h.Name() != "help" {
			continue
		}
		h.Run = nil
		h.RunE = func(c *cobra.Command, args []string) error {
			target, rest, err := c.Root().Find(args)
			if err != nil || target == nil {
				return unknownCommand(c.Root(), args[0])
			}
			if len(rest) > 0 {
				return unknownCommand(target, rest[0])
			}
			return target.Help()
		}
	}
}

// tunedGC runs a bench or scheduler command with the harness's GC settings.
func tunedGC(run runFunc) runFunc {
	return func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
		defer harness.TuneGC()()
		return run(ctx, args, stdout, stderr)
	}
}

// adapt makes cc run fn with the flags that describe (the same command,
// without what only a real run needs) defines: cobra parses them, help and
// completion list them.
func adapt(cc *cobra.Command, describe, fn runFunc, line []string, stdout, stderr io.Writer) {
	cc.Annotations = map[string]string{commandAnnotation: "true"}
	var usage strings.Builder
	fs := flag.Describe(func(args []string) { _ = describe(context.Background(), args, io.Discard, &usage) })
	if d := strings.TrimSpace(usage.String()); d != "" {
		cc.Long = cc.Short + "\n\n" + d
	}
	if fs == nil {
		// A command that parses no flags gets its arguments as they are.
		cc.DisableFlagParsing = true
		cc.RunE = func(cmd *cobra.Command, args []string) error {
			return ran{inputErrors(fn(cmd.Context(), args, stdout, stderr))}
		}
		return
	}
	cc.Flags().AddFlagSet(fs)
	cc.RunE = func(cmd *cobra.Command, _ []string) error {
		// The command line without the command's path: what cobra parsed.
		_, own, err := cmd.Root().Find(line)
		if err != nil {
			return err
		}
		runArgs, release := flag.Run(own)
		defer release()
		return ran{inputErrors(fn(cmd.Context(), runArgs, stdout, stderr))}
	}
}

// commandAnnotation marks a command of the registry (as opposed to a group
// or cobra's own help and completion).
const commandAnnotation = "llmesh-command"

// inputErrors gives every error about the input a command was given the
// usage exit code, whichever command finds it and whenever, since the
// exit-code table promises one code for it on every command: a file named
// on the command line that does not exist or cannot be opened, and an
// invalid mesh config (config.Errors, every problem with its field path).
// An error that already carries an exit code keeps it.
func inputErrors(err error) error {
	var ec *exitCode
	if err == nil || errors.As(err, &ec) {
		return err
	}
	var pe *fs.PathError
	if errors.As(err, &pe) && (errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission)) {
		return withExitCode(exitUsage, err)
	}
	var ce config.Errors
	var fe *config.FieldError
	if errors.As(err, &ce) || errors.As(err, &fe) {
		return withExitCode(exitUsage, err)
	}
	return err
}

// fileUsage is inputErrors for a command that returns before the tree
// sees its error.
func fileUsage(err error) error { return inputErrors(err) }

// meshError is the error of loading the mesh config at path (the flag
// --config names it): a usage error naming the file, every problem on its
// own line.
func meshError(path string, err error) error {
	var ce config.Errors
	if errors.As(err, &ce) && len(ce) > 1 {
		return withExitCode(exitUsage, fmt.Errorf("--config %s: %d problems:\n%w", path, len(ce), err))
	}
	return withExitCode(exitUsage, fmt.Errorf("--config %s: %w", path, err))
}

// ran marks an error returned by a command itself (as opposed to cobra's
// own, which are usage errors).
type ran struct{ err error }

func (r ran) Error() string { return r.err.Error() }
func (r ran) Unwrap() error { return r.err }

// runSimPredictCmd is `llmesh sim predict`.
func runSimPredictCmd(_ context.Context, args []string, stdout, stderr io.Writer) error {
	return runSimPredict(args, stdout, stderr)
}

// runSimFitReportCmd is `llmesh sim fit-report`.
func runSimFitReportCmd(_ context.Context, args []string, stdout, stderr io.Writer) error {
	return runSimFitReport(args, stdout, stderr)
}

// runSchedulerServe is `llmesh scheduler serve`.
func runSchedulerServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runScheduler(ctx, append([]string{"serve"}, args...), stdout, stderr)
}

// runVersion is `llmesh version`: the module version (or "(devel)" for a
// build from a checkout), the VCS revision and time the go command stamped,
// and the Go version.
func runVersion(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("llmesh version", flag.ContinueOnError)
	fs.SetOutput(stderr)
	jsonOut := fs.String("json", "", "write the version as JSON to `FILE` (- for stdout)")
	if err := fs.Parse(args); err != nil {
		return withExitCode(exitUsage, err)
	}
	if fs.NArg() > 0 {
		return withExitCode(exitUsage, fmt.Errorf("unexpected arguments: %q", fs.Args()))
	}
	v := versionInfo()
	if *jsonOut != "" {
		return writeFile(*jsonOut, stdout, func(w io.Writer) error { return writeJSON(w, v) })
	}
	_, err := fmt.Fprintf(stdout, "llmesh %s (commit %s%s, %s) %s %s/%s\n", v.Version, v.Commit, v.dirtyMark(), v.Time, v.Go, v.OS, v.Arch)
	return err
}

type version struct {
	Version string `json:"version"`
	Commit  string `json:"commit"`
	Time    string `json:"time"`
	Dirty   bool   `json:"dirty"`
	Go      string `json:"go"`
	OS      string `json:"os"`
	Arch    string `json:"arch"`
}

func (v version) dirtyMark() string {
	if v.Dirty {
		return ", modified"
	}
	return ""
}

func versionInfo() version {
	v := version{Version: "(unknown)", Commit: "unknown", Time: "unknown", Go: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	v.Version = bi.Main.Version
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Commit = s.Value
		case "vcs.time":
			v.Time = s.Value
		case "vcs.modified":
			v.Dirty = s.Value == "true"
		}
	}
	return v
}
