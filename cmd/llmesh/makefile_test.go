package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// make help lists every target a user may run: each rule of the Makefile
// whose name is a plain word (not a file under bin/).
func TestMakeHelpListsEveryTarget(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("SKIP: no make on PATH")
	}
	root := repoRoot(t)
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("make", "-s", "--no-print-directory", "help")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("make help: %v", err)
	}
	help := regexp.MustCompile(`\x1b\[[0-9;]*m`).ReplaceAllString(string(out), "")
	targets := regexp.MustCompile(`(?m)^([a-zA-Z0-9_-]+):`).FindAllStringSubmatch(string(mk), -1)
	if len(targets) < 10 {
		t.Fatalf("only %d targets found", len(targets))
	}
	for _, m := range targets {
		if !strings.Contains(help, "  "+m[1]+" ") {
			t.Errorf("make help does not list %s:\n%s", m[1], help)
		}
	}
}
