package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestREADMEMatchesRecordedRuns renders the headline from the recorded runs
// the README names and requires the README's block to be exactly that, so
// the numbers on the front page are what the command beside them prints.
func TestREADMEMatchesRecordedRuns(t *testing.T) {
	root := filepath.Join("..", "..")
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(readme)
	i, j := strings.Index(s, startMarker), strings.Index(s, endMarker)
	if i < 0 || j < i {
		t.Fatal("README.md: headline markers not found")
	}
	got := s[i+len(startMarker)+1 : j]

	// Run from the repository root, as the README and make headline do, so
	// the paths the block names are the ones written into it.
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chdir(root); err != nil {
		t.Fatal(err)
	}
	defer os.Chdir(wd)
	var want bytes.Buffer
	if err := run(nil, &want); err != nil {
		t.Fatal(err)
	}
	if got != want.String() {
		t.Errorf("README.md's headline block is not what the recorded runs render; run `go run ./scripts/headline --readme README.md`\n--- README\n%s\n--- rendered\n%s", got, want.String())
	}
}

func TestSummaryOldAndNewFiles(t *testing.T) {
	for _, c := range []struct {
		name string
		in   abFile
		want string
	}{
		{"summary field", abFile{Summary: "verdict: B (x) vs A (y): better", Verdict: "better"}, "B (x) vs A (y): better"},
		{"file before the summary field", abFile{Verdict: "verdict: B (x) vs A (y): worse"}, "B (x) vs A (y): worse"},
		{"paired status only", abFile{Verdict: "mixed"}, ""},
	} {
		if got := c.in.summary(); got != c.want {
			t.Errorf("%s: summary() = %q, want %q", c.name, got, c.want)
		}
	}
}

func TestErrorsNameTheFile(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "ab.json")
	if err := os.WriteFile(bad, []byte(`{"repeats": "two"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	sim := filepath.Join(dir, "simulate.json")
	if err := os.WriteFile(sim, []byte(`{}`), 0o644); err != nil {
		t.Fatal(err)
	}
	err := run([]string{"--simulate", sim, "--ab", bad}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), "repeats") {
		t.Errorf("bad ab.json: error %v, want one naming %s and the field", err, bad)
	}
	readme := filepath.Join(dir, "README.md")
	if err := os.WriteFile(readme, []byte("# no markers\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "good.json")
	if err := os.WriteFile(good, []byte(`{}`), 0o644); err != nil {
		t.Fatal(err)
	}
	err = run([]string{"--simulate", sim, "--ab", good, "--readme", readme}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "markers") {
		t.Errorf("README without markers: error %v, want one saying the markers are missing", err)
	}
}

func TestReplaceKeepsTheRest(t *testing.T) {
	path := filepath.Join(t.TempDir(), "README.md")
	page := "before\n" + startMarker + "\nold\n" + endMarker + "\nafter\n"
	if err := os.WriteFile(path, []byte(page), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := replace(path, "new\n"); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(path)
	want := "before\n" + startMarker + "\nnew\n" + endMarker + "\nafter\n"
	if string(got) != want {
		t.Errorf("replace: got %q, want %q", got, want)
	}
}
