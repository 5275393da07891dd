package main

import (
	"bytes"
	"context"
	"errors"
	"io"
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
		{"bench compare", []string{"--workload", missing, missing, missing}},
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

// One exit-code table over every command: a typo'd flag is one line that
// names it, suggests the flag meant and says where the flags are listed;
// a bad flag value names the flag; both exit 2, as do `help` of a command
// that does not exist and an unknown command.
func TestCLIUsageErrors(t *testing.T) {
	for _, path := range leafPaths(t) {
		args := strings.Fields(path)
		t.Run(strings.ReplaceAll(path, " ", "_"), func(t *testing.T) {
			help, _, _ := runMain(append(args, "--help")...)
			flagName := ""
			for _, l := range strings.Split(help, "\n") {
				if f, ok := strings.CutPrefix(strings.TrimSpace(l), "--"); ok {
					if name, _, _ := strings.Cut(f, " "); len(name) >= 5 && name != "help" {
						flagName = name
						break
					}
				}
			}
			if flagName == "" {
				t.Skipf("llmesh %s has no flag of 5 letters or more", path)
			}
			typo := flagName[:len(flagName)-1] + "X"
			err := mainErr(append(args, "--"+typo, "1")...)
			wantUsage(t, err, "--"+typo, "did you mean --"+flagName+"?", "llmesh "+path+" --help")
			if err != nil && strings.Contains(err.Error(), "\n") {
				t.Errorf("llmesh %s --%s: %d lines, want one: %q", path, typo, strings.Count(err.Error(), "\n")+1, err)
			}
			err = mainErr(append(args, "-"+flagName)...)
			wantUsage(t, err, "-"+flagName, "did you mean --"+flagName+"?")
		})
	}
	for _, args := range [][]string{{"bench", "run", "--rate", "fast"}, {"sim", "--max-num-seqs", "many"}, {"gateway", "--drain", "soon"}} {
		wantUsage(t, mainErr(args...), "--"+strings.TrimPrefix(args[len(args)-2], "--"), args[len(args)-1])
	}
	for _, args := range [][]string{{"help", "nosuch"}, {"help", "bench", "nosuch"}, {"nosuch"}} {
		wantUsage(t, mainErr(args...), `"nosuch"`)
	}
	wantUsage(t, mainErr("bench", "rnu"), `"rnu"`, "did you mean run?")
}

// An invalid input file is a usage error (exit 2) on every command that
// reads one, and the message names the file and every problem's field.
func TestCLIInvalidInput(t *testing.T) {
	dir := t.TempDir()
	mesh, err := os.ReadFile("../../examples/mesh.yaml")
	if err != nil {
		t.Fatal(err)
	}
	badMesh := dir + "/mesh.yaml"
	bad := strings.Replace(strings.Replace(string(mesh), "    priority: 10\n", "    priorty: 10\n", 1), "aging: 10s", "aging: soon", 1)
	if err := os.WriteFile(badMesh, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	badWorkload := dir + "/workload.yaml"
	if err := os.WriteFile(badWorkload, []byte("name: x\nclases: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	meshFields := []string{badMesh, "classes[1].priorty", "pools[0].scheduler.aging"}
	cases := []struct {
		args     []string
		mentions []string
	}{
		{[]string{"gateway", "--config", badMesh}, meshFields},
		{[]string{"control", "--config", badMesh, "--xds", "127.0.0.1:0", "--admin", "off"}, meshFields},
		{[]string{"epp", "--config", badMesh, "--listen", "127.0.0.1:0"}, meshFields},
		{[]string{"scheduler", "serve", "--config", badMesh, "--listen", "127.0.0.1:0"}, meshFields},
		{[]string{"scheduler", "bench", "--config", badMesh, "--target", "127.0.0.1:1", "--inflight", "1"}, meshFields},
		{[]string{"report", "slo", "--config", badMesh, "--prometheus", "http://127.0.0.1:1"}, meshFields},
		{[]string{"slo", "rules", "--config", badMesh}, meshFields},
		{[]string{"slo", "dashboard", "--config", badMesh}, meshFields},
		{[]string{"bench", "run", "--workload", badWorkload, "--target", "http://127.0.0.1:1"}, []string{badWorkload, "clases"}},
		{[]string{"bench", "simulate", "--workload", badWorkload}, []string{badWorkload, "clases"}},
		{[]string{"bench", "sweep", "--workload", badWorkload, "--target", "http://127.0.0.1:1", "--rates", "1"}, []string{badWorkload, "clases"}},
		{[]string{"bench", "ab", "--workload", badWorkload, "--a", "http://127.0.0.1:1", "--b", "http://127.0.0.1:1"}, []string{badWorkload, "clases"}},
		{[]string{"demo", "--workload", badWorkload}, []string{badWorkload, "clases"}},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args[:2], "_"), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err := Main(ctx, c.args, io.Discard, io.Discard)
			if ctx.Err() != nil {
				t.Fatalf("llmesh %q ran until the deadline instead of failing on the invalid file", c.args)
			}
			wantUsage(t, err, c.mentions...)
		})
	}
}
