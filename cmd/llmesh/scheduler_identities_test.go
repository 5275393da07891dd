package main

import (
	"os"
	"path/filepath"
	"testing"
)

// A bad identities file is a usage error naming the file's field, reported
// with the other flags' problems.
func TestSchedulerIdentitiesFlag(t *testing.T) {
	path := filepath.Join(t.TempDir(), "identities.yaml")
	if err := os.WriteFile(path, []byte("identities:\n  - name: gw\n    certificates: [gw]\n    max_leases: -1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	wantUsage(t, mainErr("scheduler", "serve", "--identities", path, "--max-sessions", "0"),
		"--identities: identities: "+path+": identities[0].max_leases: -1 must not be negative", "--max-sessions")
	wantUsage(t, mainErr("scheduler", "serve", "--identities", filepath.Join(t.TempDir(), "missing.yaml")), "--identities: identities: open")
}
