package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"regexp"
	"runtime"
	"runtime/debug"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/llmesh/llmesh/bench/harness"
)

// The command tree is cobra's (help, completion, one help and error
// style, as kubectl, helm and hugo use it), but every command keeps the
// signature func(ctx, args, stdout, stderr) error with its own stdlib
// flag.FlagSet: cobra does no flag parsing for them (DisableFlagParsing)
// and hands them their arguments unchanged. What the adapter adds:
//   - -h/--help anywhere before "--" prints cobra-style help, whose Flags
//     section is the command's own FlagSet (obtained by running the command
//     with -h into a buffer and reformatting flag.PrintDefaults), exit 0;
//   - the same flag names complete in the shell (llmesh completion);
//   - cobra's own errors (unknown command) are usage errors, exit 2.

// newRoot builds the cobra tree from commands and benchCommands.
func newRoot(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "llmesh",
		Short: "llmesh — measure, relocate and schedule LLM traffic",
		Long: "llmesh — measure, relocate and schedule LLM traffic.\n\n" +
			"Start with: llmesh demo\n\n" + exitCodeHelp,
		SilenceErrors: true,
		SilenceUsage:  true,
		// No Run: without arguments cobra prints the help, exit 0.
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
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
			adapt(cc, run, stdout, stderr)
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
	return root
}

// groupRun is a group's own run: its help, or a usage error for an
// unknown subcommand.
func groupRun(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("unknown command %q for %q", args[0], cmd.CommandPath())
	}
	return cmd.Help()
}

// tunedGC runs a bench or scheduler command with the harness's GC settings.
func tunedGC(run func(context.Context, []string, io.Writer, io.Writer) error) func(context.Context, []string, io.Writer, io.Writer) error {
	return func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
		defer harness.TuneGC()()
		return run(ctx, args, stdout, stderr)
	}
}

// adapt makes cc run fn with its arguments untouched.
func adapt(cc *cobra.Command, fn func(context.Context, []string, io.Writer, io.Writer) error, stdout, stderr io.Writer) {
	cc.DisableFlagParsing = true
	path := func() string { return cc.CommandPath() }
	flagsHelp := func() (desc string, flags []flagHelp) {
		var buf bytes.Buffer
		_ = fn(context.Background(), []string{"-h"}, io.Discard, &buf)
		return parseFlagDefaults(buf.String())
	}
	cc.RunE = func(cmd *cobra.Command, args []string) error {
		if wantsHelp(args) {
			desc, flags := flagsHelp()
			return writeHelp(stdout, path(), cc, desc, flags)
		}
		err := fn(cmd.Context(), args, stdout, stderr)
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return ran{fileUsage(err)}
	}
	cc.SetHelpFunc(func(*cobra.Command, []string) {
		desc, flags := flagsHelp()
		_ = writeHelp(stdout, path(), cc, desc, flags)
	})
	cc.ValidArgsFunction = func(_ *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		if !strings.HasPrefix(toComplete, "-") {
			return nil, cobra.ShellCompDirectiveDefault
		}
		_, flags := flagsHelp()
		var out []string
		for _, f := range flags {
			if strings.HasPrefix("--"+f.name, toComplete) {
				out = append(out, "--"+f.name+"\t"+firstLine(f.usage))
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// fileUsage makes a file named on the command line that does not exist or
// cannot be opened a usage error (exit 2), whichever command opens it and
// whenever: the exit-code table promises one code for it on every command.
// An error that already carries an exit code keeps it.
func fileUsage(err error) error {
	var ec *exitCode
	var pe *fs.PathError
	if err == nil || errors.As(err, &ec) || !errors.As(err, &pe) {
		return err
	}
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
		return withExitCode(exitUsage, err)
	}
	return err
}

// ran marks an error returned by a command itself (as opposed to cobra's
// own, which are usage errors).
type ran struct{ err error }

func (r ran) Error() string { return r.err.Error() }
func (r ran) Unwrap() error { return r.err }

// wantsHelp reports whether args ask for help before a "--".
func wantsHelp(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-h", "-help", "--help":
			return true
		}
	}
	return false
}

// flagHelp is one flag as flag.PrintDefaults describes it.
type flagHelp struct{ name, arg, usage string }

var flagHeadRE = regexp.MustCompile(`^  -([^\s]+)(?: (\S+))?(?:\t(.*))?$`)

// parseFlagDefaults splits a command's -h output (its own Usage text, if
// any, then flag.PrintDefaults) into the description and the flags.
func parseFlagDefaults(s string) (desc string, flags []flagHelp) {
	var d []string
	for _, line := range strings.Split(s, "\n") {
		if m := flagHeadRE.FindStringSubmatch(line); m != nil {
			flags = append(flags, flagHelp{name: m[1], arg: m[2], usage: m[3]})
			continue
		}
		if strings.HasPrefix(line, "    \t") && len(flags) > 0 {
			f := &flags[len(flags)-1]
			f.usage = strings.TrimSpace(f.usage + " " + strings.TrimSpace(line))
			continue
		}
		t := strings.TrimSpace(line)
		if strings.HasPrefix(t, "Usage of ") || t == "Flags:" || strings.HasPrefix(strings.ToLower(t), "usage: llmesh") {
			continue
		}
		d = append(d, line)
	}
	return strings.TrimSpace(strings.Join(d, "\n")), flags
}

func firstLine(s string) string { l, _, _ := strings.Cut(s, "\n"); return l }

// writeHelp prints one command's help in the tree's one style.
func writeHelp(w io.Writer, path string, cc *cobra.Command, desc string, flags []flagHelp) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n\nUsage:\n  %s", cc.Short, path)
	if len(flags) > 0 {
		b.WriteString(" [flags]")
	}
	b.WriteString("\n")
	if cc.HasAvailableSubCommands() {
		fmt.Fprintf(&b, "  %s [command]\n\nAvailable Commands:\n", path)
		for _, s := range cc.Commands() {
			if s.IsAvailableCommand() {
				fmt.Fprintf(&b, "  %-14s %s\n", s.Name(), s.Short)
			}
		}
	}
	if desc != "" {
		fmt.Fprintf(&b, "\n%s\n", desc)
	}
	if len(flags) > 0 {
		b.WriteString("\nFlags:\n")
		width := 0
		heads := make([]string, len(flags))
		for i, f := range flags {
			heads[i] = "--" + f.name
			if f.arg != "" {
				heads[i] += " " + f.arg
			}
			width = max(width, len(heads[i]))
		}
		for i, f := range flags {
			fmt.Fprintf(&b, "  %-*s  %s\n", width, heads[i], f.usage)
		}
		fmt.Fprintf(&b, "  %-*s  %s\n", width, "-h, --help", "help for "+cc.Name())
	}
	fmt.Fprintf(&b, "\n%s\n", exitCodeHelp)
	_, err := io.WriteString(w, b.String())
	return err
}

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
