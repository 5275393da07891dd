package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// `llmesh demo --a nosuch` is a usage error found before anything is
// written: the previous outputs in --out stay as they were.
func TestDemoUnknownPolicyIsUsageError(t *testing.T) {
	out := t.TempDir()
	old := map[string]string{"report.html": "<p>old</p>", "report.md": "# old", "ab.json": `{"valid": true}`}
	for name, body := range old {
		mustWrite(t, filepath.Join(out, name), []byte(body), 0o644)
	}
	var stdout, stderr bytes.Buffer
	err := Main(context.Background(), []string{"demo", "--quick", "--a", "nosuch", "--out", out}, &stdout, &stderr)
	if exitCodeOf(err) != 2 || !strings.Contains(err.Error(), `--a: `) || !strings.Contains(err.Error(), `"nosuch" is not a known policy`) {
		t.Fatalf("exit %d, %v; want exit 2 naming --a", exitCodeOf(err), err)
	}
	entries, _ := os.ReadDir(out)
	if len(entries) != len(old) {
		t.Errorf("the output directory holds %d files, want the %d it had", len(entries), len(old))
	}
	for name, body := range old {
		if got, err := os.ReadFile(filepath.Join(out, name)); err != nil || string(got) != body {
			t.Errorf("%s was overwritten (%v): %q", name, err, got)
		}
	}
}

// Bad --max-lag and --retries are named at once, before anything runs.
func TestDemoLagAndRetryFlags(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	var stdout, stderr bytes.Buffer
	err := Main(context.Background(), []string{"demo", "--quick", "--max-lag", "-1ms", "--retries", "11", "--out", out}, &stdout, &stderr)
	if exitCodeOf(err) != 2 || !strings.Contains(err.Error(), "--max-lag: -1ms must not be negative") || !strings.Contains(err.Error(), "--retries: 11 must be in [0, 10]") {
		t.Fatalf("exit %d, %v; want exit 2 naming --max-lag and --retries", exitCodeOf(err), err)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("--out was created: %v", err)
	}
}
