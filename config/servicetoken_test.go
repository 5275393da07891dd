package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestServiceToken(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.token")
	bad := filepath.Join(dir, "bad.token")
	if err := os.WriteFile(good, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte("two words\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ file, want, err string }{
		{"", "", ""},
		{good, "s3cret", ""},
		{bad, "", "scheduler_service.token_file: " + bad + " must hold one token"},
		{filepath.Join(dir, "missing"), "", "scheduler_service.token_file: open"},
	} {
		got, err := (&SchedulerService{TokenFile: tc.file}).ServiceToken()
		if got != tc.want || (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%q: %q, %v; want %q, an error with %q", tc.file, got, err, tc.want, tc.err)
		}
	}
}
