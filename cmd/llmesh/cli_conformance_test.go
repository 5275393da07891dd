package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

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
			if s.Annotations[commandAnnotation] != "" {
				out = append(out, strings.TrimPrefix(s.CommandPath(), "llmesh "))
			}
			walk(s)
		}
	}
	walk(newRoot(nil, nil, nil))
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

// inputFileFlags name the flags that read a file; a command with one of
// them must be in TestCLIMissingFile's table.
var inputFileFlags = []string{"workload", "trace", "config", "check", "records"}

// A file named on the command line that does not exist is a usage error,
// exit 2, on every command that reads one, and the message names it.
func TestCLIMissingFile(t *testing.T) {
	const missing = "/nonexistent/llmesh-missing-input"
	std := "../../bench/workloads/mixed-priority.yaml"
	cases := []struct {
		path string
		args []string
	}{
		{"bench run", []string{"--workload", missing, "--target", "http://127.0.0.1:1"}},
		{"bench report", []string{missing}},
		{"bench report", []string{"--records", missing, "--workload", std}},
		{"bench report", []string{"--records", missing + ".jsonl", "--workload", missing}},
		{"bench ab", []string{"--workload", missing, "--a", "http://127.0.0.1:1", "--b", "http://127.0.0.1:1"}},
		{"bench ab", []string{"--a", "embedded:" + missing, "--b", "http://127.0.0.1:1", "--rate", "1", "--duration", "1s"}},
		{"bench sweep", []string{"--workload", missing, "--target", "http://127.0.0.1:1", "--rates", "1"}},
		{"bench simulate", []string{"--workload", missing}},
		{"bench simulate", []string{"--trace", missing}},
		{"bench simulate", []string{"--a", "exec:" + missing, "--b", "fifo"}},
		{"bench simulate", []string{"--a", "fifo", "--b", "exec:" + os.Args[0] + ",mesh=" + missing}},
		{"bench ab", []string{"--a", "exec:" + missing + ",mesh=" + std, "--b", "http://127.0.0.1:1", "--rate", "1", "--duration", "1s"}},
		{"bench calibrate", []string{"--workload", missing}},
		{"sim fit-report", []string{"--check", missing}},
		{"control", []string{"--config", missing, "--xds", "127.0.0.1:0", "--admin", "off"}},
		{"gateway", []string{"--config", missing}},
		{"epp", []string{"--config", missing, "--listen", "127.0.0.1:0"}},
		{"scheduler serve", []string{"--config", missing, "--listen", "127.0.0.1:0"}},
		{"scheduler bench", []string{"--config", missing, "--target", "127.0.0.1:1", "--inflight", "1"}},
		{"demo", []string{"--workload", missing}},
		{"report slo", []string{"--config", missing, "--prometheus", "http://127.0.0.1:1"}},
		{"slo rules", []string{"--config", missing}},
		{"slo dashboard", []string{"--config", missing}},
	}
	covered := map[string]bool{}
	for _, c := range cases {
		covered[c.path] = true
		t.Run(strings.ReplaceAll(c.path, " ", "_"), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var o, e bytes.Buffer
			err := Main(ctx, append(strings.Fields(c.path), c.args...), &o, &e)
			if ctx.Err() != nil {
				t.Fatalf("llmesh %s %q ran until the deadline instead of failing on the missing file", c.path, c.args)
			}
			code := 0
			if err != nil {
				code = exitError
				var ec *exitCode
				if errors.As(err, &ec) {
					code = ec.code
				}
			}
			if code != exitUsage || !strings.Contains(err.Error(), missing) {
				t.Errorf("llmesh %s %q: exit %d, error %v; want exit %d naming %s", c.path, c.args, code, err, exitUsage, missing)
			}
		})
	}
	for _, path := range leafPaths(t) {
		help, _, _ := runMain(append(strings.Fields(path), "--help")...)
		for _, f := range inputFileFlags {
			if strings.Contains(help, "  --"+f+" ") && !covered[path] {
				t.Errorf("llmesh %s reads a file (--%s) but is not in this test's table", path, f)
			}
		}
	}
}
