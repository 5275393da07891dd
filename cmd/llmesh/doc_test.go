package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/llmesh/llmesh/testkit/proctest"
)

// The doc tests run every shell block of README.md and docs/*.md as a bash
// script. The commands in them call `llmesh`, which is this test binary
// started again with docExecEnv set: TestMain then runs main instead of the
// tests, so the documented commands run the code under test without a
// separate build.
const docExecEnv = "LLMESH_DOCTEST_EXEC"

// raceEnabled is set under -race (race_test.go).
var raceEnabled bool

func TestMain(m *testing.M) {
	switch os.Getenv(docExecEnv) {
	case "llmesh":
		main()
		os.Exit(0)
	case "wait":
		os.Exit(waitListening(os.Args[1:], 90*time.Second))
	}
	os.Exit(m.Run())
}

// waitListening polls until every address accepts a TCP connection; it is
// what a doc block runs after each command it puts in the background.
func waitListening(addrs []string, timeout time.Duration) int {
	deadline := time.Now().Add(timeout)
	for _, a := range addrs {
		for {
			c, err := net.DialTimeout("tcp", a, time.Second)
			if err == nil {
				c.Close()
				break
			}
			if time.Now().After(deadline) {
				fmt.Fprintf(os.Stderr, "doctest: %s not listening after %v: %v\n", a, timeout, err)
				return 1
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return 0
}

// repoRoot is the module root, two levels above this package.
func repoRoot(t testing.TB) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// docPages are README.md and every docs/*.md page (docs/results/ holds
// measurement notes, which are covered too).
func docPages(t testing.TB) []string {
	t.Helper()
	root := repoRoot(t)
	pages := []string{filepath.Join(root, "README.md")}
	for _, pat := range []string{"docs/*.md", "docs/*/*.md"} {
		m, err := filepath.Glob(filepath.Join(root, pat))
		if err != nil {
			t.Fatal(err)
		}
		pages = append(pages, m...)
	}
	sort.Strings(pages[1:])
	return pages
}

// docSubstitution rewrites a documented command so that a test runs it in
// seconds. Each one is listed here, so what the test changes is visible.
type docSubstitution struct {
	what string
	only *regexp.Regexp // commands it applies to; nil: all
	re   *regexp.Regexp
	repl string
}

var docSubstitutions = []docSubstitution{
	{"go run is the binary under test", nil, regexp.MustCompile(`^go run \./cmd/llmesh\b`), "llmesh"},
	{"measured runs last 1 s", nil, regexp.MustCompile(`--duration[ =]\S+`), "--duration 1s"},
	{"no warm-up", nil, regexp.MustCompile(`--warmup[ =]\S+`), "--warmup 0s"},
	{"one A/B pair", nil, regexp.MustCompile(`--repeats[ =]\d+`), "--repeats 1"},
	{"two sweep points", nil, regexp.MustCompile(`--rates[ =]\S+`), "--rates 2,4"},
	{"real-time runs use a small two-class workload: the standard one's requests take seconds each",
		regexp.MustCompile(`^llmesh bench (run|ab|sweep|report)\b`),
		regexp.MustCompile(`bench/workloads/mixed-priority\.yaml`), "{testdata}/doctest-workload.yaml"},
}

// docAppends are flags added to commands that set no duration of their own.
var docAppends = []struct {
	re    *regexp.Regexp
	flags string
	// unless names a flag whose presence makes the append wrong (a
	// trace sets its own length).
	unless string
}{
	{regexp.MustCompile(`^llmesh bench (run|ab|sweep)\b`), "--duration 1s --warmup 0s", ""},
	{regexp.MustCompile(`^llmesh bench simulate\b`), "--duration 60s", "--trace "},
	{regexp.MustCompile(`^llmesh demo\b`), "--repeats 1 --duration 1s --workload {testdata}/doctest-workload.yaml", ""},
}

// docRunnable are the programs a runnable block may call. Anything else
// (make, envoy, docker, go test) needs the block marked
// `<!-- doctest: skip REASON -->`.
var docRunnable = map[string]bool{"llmesh": true, "curl": true, "cat": true, "ls": true, "test": true, "grep": true, "head": true}

var (
	addrRE   = regexp.MustCompile(`\b(127\.0\.0\.1|localhost):(\d{2,5})\b`)
	outputRE = regexp.MustCompile(`--(json|jsonl|html|markdown|out)[ =]([^\s-][^\s]*)`)
	envRE    = regexp.MustCompile(`^[A-Z_][A-Z0-9_]*=\S*$`)
)

// printsRE is a command's comment that quotes what it prints:
// `# prints "saturation: 8.79 req/s …"`. The block's output must contain the
// quoted text (less a trailing "…"), so a number a page quotes is the one the
// command gives.
var printsRE = regexp.MustCompile(`\bprints "([^"]+)"`)

// docScript turns a block into a bash script: ports replaced by free ones,
// substitutions applied, a readiness wait after every background command,
// and background commands stopped when the script ends. It also returns the
// output files the commands name and the texts their comments say they print.
func docScript(t *testing.T, b docBlock, testdata string) (script string, outputs, prints []string, ncmd int) {
	t.Helper()
	ports := map[string]string{}
	body := addrRE.ReplaceAllStringFunc(b.body, func(a string) string {
		m := addrRE.FindStringSubmatch(a)
		if ports[m[2]] == "" {
			ports[m[2]] = proctest.Port(t, proctest.FreeAddr(t))
		}
		return "127.0.0.1:" + ports[m[2]]
	})
	var s strings.Builder
	s.WriteString("set -euo pipefail\ntrap 'jobs -p | xargs -r kill 2>/dev/null; wait' EXIT\n")
	for _, c := range docCommands(body) {
		for _, sub := range docSubstitutions {
			if sub.only == nil || sub.only.MatchString(c) {
				c = sub.re.ReplaceAllString(c, strings.ReplaceAll(sub.repl, "{testdata}", testdata))
			}
		}
		code, comment, _ := strings.Cut(c, " #")
		for _, m := range printsRE.FindAllStringSubmatch(comment, -1) {
			prints = append(prints, strings.TrimSpace(strings.TrimSuffix(m[1], "…")))
		}
		code = strings.TrimSpace(code)
		bg := strings.HasSuffix(code, "&")
		code = strings.TrimSpace(strings.TrimSuffix(code, "&"))
		words := strings.Fields(code)
		for len(words) > 0 && envRE.MatchString(words[0]) {
			words = words[1:]
		}
		if len(words) == 0 {
			continue
		}
		if !docRunnable[words[0]] {
			t.Errorf("%s: %q cannot run in a test: run it from a runnable block or mark the block %s REASON -->", b, words[0], skipMarker)
			continue
		}
		if words[0] != "llmesh" {
			if _, err := exec.LookPath(words[0]); err != nil {
				t.Skipf("SKIP %s: %s is not installed here", b, words[0])
			}
		}
		for _, a := range docAppends {
			if a.re.MatchString(code) && (a.unless == "" || !strings.Contains(code, a.unless)) {
				add := strings.ReplaceAll(a.flags, "{testdata}", testdata)
				for _, f := range strings.Fields(add) {
					if strings.HasPrefix(f, "--") && strings.Contains(code, f+" ") {
						add = "" // the command sets it; the substitutions shortened it
					}
				}
				code += " " + add
			}
		}
		for _, m := range outputRE.FindAllStringSubmatch(code, -1) {
			if m[2] != "-" {
				outputs = append(outputs, m[2])
			}
		}
		ncmd++
		s.WriteString(code)
		if bg {
			s.WriteString(" &\n")
			var addrs []string
			for _, m := range addrRE.FindAllString(code, -1) {
				addrs = append(addrs, m)
			}
			if len(addrs) > 0 {
				s.WriteString(`"$DOCTEST_WAIT" ` + strings.Join(addrs, " "))
			}
		}
		s.WriteString("\n")
	}
	return s.String(), outputs, prints, ncmd
}

// TestDocs runs every shell block of README.md and docs/*.md that is not
// marked as not runnable here, and fails on a non-zero exit (4, a run the
// harness flagged invalid on a loaded machine, is logged and accepted), an
// output file a command names that is not there afterwards, an untagged
// code fence, or a command that cannot run in a test in an unmarked block.
func TestDocs(t *testing.T) {
	if testing.Short() {
		t.Skip("SKIP: doc commands run real load for seconds each; not in -short")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	root := repoRoot(t)
	testdata, err := filepath.Abs("testdata")
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	wrap := func(name, mode, exe string) {
		sh := fmt.Sprintf("#!/bin/sh\n%s=%s exec %q \"$@\"\n", docExecEnv, mode, exe)
		if err := os.WriteFile(filepath.Join(bin, name), []byte(sh), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	llmesh := self
	if raceEnabled {
		var b proctest.Builder
		defer b.Close()
		llmesh = b.Build(t, "llmesh", ".")
	}
	wrap("llmesh", "llmesh", llmesh)
	wrap("doctest-wait", "wait", self)
	total, skipped := 0, 0
	for _, page := range docPages(t) {
		text, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, page)
		blocks, err := parseDocBlocks(rel, string(text))
		if err != nil {
			t.Error(err)
			continue
		}
		for _, b := range blocks {
			if b.info == "" {
				t.Errorf("%s: untagged code fence: tag it sh (commands, run by this test) or text (output, diagrams)", b)
				continue
			}
			if !shellInfos[b.info] {
				continue
			}
			if b.skip != "" {
				skipped++
				t.Logf("SKIP %s: %s", b, b.skip)
				continue
			}
			t.Run(strings.NewReplacer("/", "_", ".md", "").Replace(rel)+fmt.Sprintf(":%d", b.line), func(t *testing.T) {
				total += runDocBlock(t, b, root, bin, testdata)
			})
		}
	}
	t.Logf("doc tests: %d commands run, %d blocks marked not runnable here", total, skipped)
}

// runDocBlock runs one block in a fresh directory that links the
// repository's files (so bench/workloads/… and examples/… resolve) and
// returns how many commands it ran.
func runDocBlock(t *testing.T, b docBlock, root, bin, testdata string) int {
	script, outputs, prints, n := docScript(t, b, testdata)
	if t.Failed() {
		return 0
	}
	dir := t.TempDir()
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		switch e.Name() {
		case "results", "llmesh-demo-out", ".git":
			continue // outputs go into dir, never into the repository
		}
		if err := os.Symlink(filepath.Join(root, e.Name()), filepath.Join(dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := proctest.Command(ctx, "bash", "-c", script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "DOCTEST_WAIT="+filepath.Join(bin, "doctest-wait"))
	start := time.Now()
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case ctx.Err() != nil:
		t.Errorf("%s: still running after 3m", b)
	case errors.As(err, &ee) && ee.ExitCode() == 4:
		t.Logf("%s: exit 4 (a run flagged invalid for schedule lag on this loaded machine): accepted", b)
	default:
		t.Errorf("%s: %v", b, err)
	}
	for _, o := range outputs {
		if _, err := os.Stat(filepath.Join(dir, o)); err != nil {
			t.Errorf("%s: output %s missing: %v", b, o, err)
		}
	}
	for _, p := range prints {
		if !strings.Contains(string(out), p) {
			t.Errorf("%s: the page says a command prints %q; the output does not contain it", b, p)
		}
	}
	if t.Failed() || testing.Verbose() {
		t.Logf("%s: %d commands in %v\n--- script ---\n%s--- output ---\n%s", b, n, time.Since(start).Round(time.Millisecond), script, tail(string(out), 4000))
	}
	return n
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// wholeLink is a markdown link, text and target.
var wholeLink = regexp.MustCompile(`\[[^\]]*\]\([^)\s]+\)`)

// climbRE is a relative path that climbs out of its directory with "../"
// and names something inside a directory there (`../shared/traces/x.csv`);
// a bare `../name` is where a command puts something (a worktree), not a
// file the page relies on.
var climbRE = regexp.MustCompile(`(?:\.\./)+[A-Za-z0-9_.\-]+/[A-Za-z0-9_.\-/]+`)

// upperDocRE is a top-level document's name as pages cite it (README.md,
// ARCHITECTURE.md): an upper-case markdown file name.
var upperDocRE = regexp.MustCompile(`\b[A-Z][A-Z0-9_-]*\.md\b`)

// repoMarkdown is the set of markdown file names anywhere in the
// repository, so that a page citing an upper-case document by name can be
// checked against what the repository holds.
func repoMarkdown(t *testing.T, root string) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(d.Name(), ".md") {
			names[d.Name()] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// docOutsideKnown are references to files outside the repository that pages
// other than this test's owners still make, by page and the reference; each
// entry fails the test once the page no longer has it, so the list only
// shrinks.
var docOutsideKnown = map[string]string{}

// TestDocsStayInRepo fails on a page that cites a file the repository does
// not hold: a document named that no file of the repository has (the design
// is docs/architecture.md), a link that leaves the repository, or a path in a command or a
// code span that climbs above the repository root (commands run from it).
func TestDocsStayInRepo(t *testing.T) {
	root := repoRoot(t)
	inside := func(p string) bool {
		r, err := filepath.Rel(root, p)
		return err == nil && r != ".." && !strings.HasPrefix(r, ".."+string(filepath.Separator))
	}
	seen := map[string]bool{}
	held := repoMarkdown(t, root)
	for _, page := range docPages(t) {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, page)
		for n, line := range strings.Split(string(b), "\n") {
			var bad []string
			for _, name := range upperDocRE.FindAllString(line, -1) {
				if !held[name] {
					bad = append(bad, name+" (no such document here; the design is docs/architecture.md)")
				}
			}
			for _, m := range docLink.FindAllStringSubmatch(line, -1) {
				path, _, _ := strings.Cut(m[1], "#")
				if path == "" || strings.Contains(path, "://") || strings.HasPrefix(path, "mailto:") {
					continue
				}
				if !inside(filepath.Join(filepath.Dir(page), path)) {
					bad = append(bad, "link "+m[1])
				}
			}
			for _, p := range climbRE.FindAllString(wholeLink.ReplaceAllString(line, ""), -1) {
				if !inside(filepath.Join(root, p)) {
					bad = append(bad, p)
				}
			}
			for _, what := range bad {
				key := rel + ": " + what
				if _, ok := docOutsideKnown[key]; ok {
					seen[key] = true
					continue
				}
				t.Errorf("%s:%d: %s is outside the repository: cite a file in it (or say where the public source is)", rel, n+1, what)
			}
		}
	}
	for key, why := range docOutsideKnown {
		if !seen[key] {
			t.Errorf("docOutsideKnown lists %q (%s), which no page has any more: remove the entry", key, why)
		}
	}
}

func TestDocScriptPrints(t *testing.T) {
	b := docBlock{file: "x.md", line: 1, info: "sh", body: "llmesh bench simulate --brief    # prints \"saturation: 8.79 req/s …\" and a table\nllmesh sim predict   # the step time\n"}
	_, _, prints, n := docScript(t, b, "td")
	if n != 2 || len(prints) != 1 || prints[0] != "saturation: 8.79 req/s" {
		t.Errorf("docScript: %d commands, prints %q; want 2 commands and [\"saturation: 8.79 req/s\"]", n, prints)
	}
}

// TestDocFuzzTable holds docs/hardening.md's table of fuzz targets to the
// tree: every `func FuzzX` in a test file is listed under its package, and
// every listed target exists.
func TestDocFuzzTable(t *testing.T) {
	root := repoRoot(t)
	page, err := os.ReadFile(filepath.Join(root, "docs", "hardening.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(page), "\n## Fuzzing\n")
	if !ok {
		t.Fatal("docs/hardening.md: no \"## Fuzzing\" section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	fuzzName := regexp.MustCompile(`\bFuzz[A-Za-z0-9_]+`)
	listed := map[string]bool{}
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 4 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			continue
		}
		pkg := strings.Trim(strings.TrimSpace(cells[1]), "`")
		for _, f := range fuzzName.FindAllString(cells[2], -1) {
			listed[pkg+"."+f] = true
		}
	}
	if len(listed) == 0 {
		t.Fatal("docs/hardening.md: no fuzz targets found in the Fuzzing table")
	}
	funcFuzz := regexp.MustCompile(`(?m)^func (Fuzz[A-Za-z0-9_]*)\(`)
	inTree := map[string]bool{}
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "results", "testdata", "node_modules":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		dir, _ := filepath.Rel(root, filepath.Dir(path))
		for _, m := range funcFuzz.FindAllStringSubmatch(string(b), -1) {
			inTree[filepath.ToSlash(dir)+"."+m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for k := range inTree {
		if !listed[k] {
			t.Errorf("%s is not in docs/hardening.md's Fuzzing table: add it under its package", k)
		}
	}
	for k := range listed {
		if !inTree[k] {
			t.Errorf("docs/hardening.md's Fuzzing table lists %s, which no test file defines", k)
		}
	}
	t.Logf("%d fuzz targets listed and defined", len(inTree))
}
