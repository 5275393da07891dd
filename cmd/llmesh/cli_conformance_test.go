package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// leafPaths are every runnable command of the tree, as the user types them.
func leafPaths(t *testing.T) []string {
	t.Helper()
	var out []string
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, s := range c.Commands() {
			if s.Name() == "help" || s.Name() == "completion" {
				continue
			}
			if s.DisableFlagParsing { // an adapted command
				out = append(out, strings.TrimPrefix(s.CommandPath(), "llmesh "))
			}
			walk(s)
		}
	}
	walk(newRoot(nil, nil))
	if len(out) < 10 {
		t.Fatalf("only %d commands: %q", len(out), out)
	}
	return out
}

func runMain(args ...string) (stdout, stderr string, code int) {
	var o, e bytes.Buffer
	err := Main(context.Background(), args, &o, &e)
	code = 0
	if err != nil {
		code = exitError
		var ec *exitCode
		if errors.As(err, &ec) {
			code = ec.code
		}
	}
	return o.String(), e.String(), code
}

// One conformance table over every command, so a command added to the
// registry is checked by the same rules: help in one style with exit 0,
// listed in llmesh --help, unknown flags are usage errors, --json takes a
// file, and the load commands share their flags.
func TestCLIConformance(t *testing.T) {
	rootHelp, _, code := runMain("--help")
	if code != 0 {
		t.Fatalf("llmesh --help: exit %d", code)
	}
	loadFlags := []string{"workload", "rate", "duration", "requests", "warmup", "seed", "max-lag", "json", "jsonl", "html", "markdown", "format", "slo-gate", "quiet"}
	loadCommands := map[string]bool{"bench run": true, "bench ab": true, "bench sweep": true}
	// Not there yet, and listed so that the gap is visible: ab and sweep
	// have no per-request export over several runs, sweep no report
	// renderers but its table and JSON.
	notYet := map[string]string{"bench ab jsonl": "", "bench sweep jsonl": "", "bench sweep html": "", "bench sweep markdown": "", "bench sweep format": "", "bench sweep slo-gate": ""}
	for _, path := range leafPaths(t) {
		args := strings.Fields(path)
		t.Run(strings.ReplaceAll(path, " ", "_"), func(t *testing.T) {
			if !strings.Contains(rootHelp, "llmesh "+path+"\n") {
				t.Errorf("llmesh --help does not list llmesh %s", path)
			}
			var help string
			for _, h := range []string{"-h", "--help"} {
				out, errOut, code := runMain(append(args, h)...)
				if code != 0 || !strings.Contains(out, "Usage:\n  llmesh "+path) || !strings.Contains(out, "Exit codes:") {
					t.Errorf("llmesh %s %s: exit %d, stdout %q, stderr %q; want the help on stdout, exit 0", path, h, code, out, errOut)
				}
				help = out
			}
			if _, _, code := runMain(append(args, "--no-such-flag")...); code != exitUsage {
				t.Errorf("llmesh %s --no-such-flag: exit %d, want %d", path, code, exitUsage)
			}
			if strings.Contains(help, "  --json ") && !strings.Contains(help, "  --json FILE") {
				t.Errorf("llmesh %s: --json must take a FILE (- for stdout):\n%s", path, help)
			}
			if loadCommands[path] {
				for _, f := range loadFlags {
					if _, ok := notYet[path+" "+f]; ok {
						continue
					}
					if !strings.Contains(help, "  --"+f+" ") {
						t.Errorf("llmesh %s: no --%s, a flag every load command has", path, f)
					}
				}
			}
		})
	}
	for _, sh := range []string{"bash", "zsh"} {
		out, _, code := runMain("completion", sh)
		if code != 0 || !strings.Contains(out, "llmesh") {
			t.Errorf("llmesh completion %s: exit %d, %d bytes", sh, code, len(out))
		}
	}
	// Flags of an adapted command complete too.
	out, _, _ := runMain("__complete", "bench", "run", "--tar")
	if !strings.Contains(out, "--target") {
		t.Errorf("completion of bench run --tar: %q", out)
	}
	if out, _, code := runMain("version"); code != 0 || !strings.HasPrefix(out, "llmesh ") {
		t.Errorf("llmesh version: exit %d, %q", code, out)
	}
	for _, args := range [][]string{{"nonsense"}, {"bench", "nonsense"}, {"--no-such-flag"}} {
		if _, _, code := runMain(args...); code != exitUsage {
			t.Errorf("llmesh %q: exit %d, want %d", args, code, exitUsage)
		}
	}
}
