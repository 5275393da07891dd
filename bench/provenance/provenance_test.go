package provenance

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestOfCopiesHashAlike(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	a, b := filepath.Join(t.TempDir(), "x"), filepath.Join(t.TempDir(), "y")
	for _, p := range []string{a, b} {
		if err := os.WriteFile(p, data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ba, err := Of(a)
	if err != nil {
		t.Fatal(err)
	}
	bb, _ := Of(b)
	if ba.SHA256 == "" || ba.SHA256 != bb.SHA256 || ba.Path != a || ba.GoVersion == "" {
		t.Fatalf("builds %+v and %+v: want one hash, each path, the toolchain", ba, bb)
	}
	// One changed byte is another build.
	data[len(data)-1] ^= 1
	if err := os.WriteFile(b, data, 0o755); err != nil {
		t.Fatal(err)
	}
	if bb, _ = Of(b); bb.SHA256 == ba.SHA256 {
		t.Fatal("a changed binary hashed the same")
	}
	if _, err := Of(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Fatal("no error for a missing binary")
	}
	if s := Self(); s.Revision == "" && s.SHA256 == "" {
		t.Fatalf("the running build has neither a revision nor a hash: %+v", s)
	}
}

func TestMarkdownAndHost(t *testing.T) {
	p := &Provenance{
		Builds: map[string]Build{"A": {Path: "/a/llmesh", Module: "m", Version: "v1", Revision: "abc", Modified: true}, "B": {SHA256: strings.Repeat("f", 64)}},
		Files:  map[string]string{"workload w.yaml": strings.Repeat("0", 64)},
		Seeds:  []int64{7, 8, 9},
		Host:   Host{OS: "linux", Arch: "amd64", Cores: 2, LoadAvg: "0.5 0.4 0.3"},
	}
	var buf bytes.Buffer
	if err := p.WriteMarkdown(&buf); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| build A | `/a/llmesh m@v1 rev abc (modified)` |", "| build B | `sha256:ffffffffffff` |",
		"| workload w.yaml | sha256:000000000000 |", "| seeds | 7…9 (3) |", "2 cores, load average 0.5 0.4 0.3 at start"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, buf.String())
		}
	}
	if h := HostNow(); h.Cores < 1 || h.OS == "" {
		t.Errorf("host %+v", h)
	}
	if got := seedList([]int64{1, 5}); got != "1, 5" {
		t.Errorf("seedList = %q", got)
	}
}

func FuzzParseLoadAvg(f *testing.F) {
	for _, s := range []string{"0.52 0.58 0.59 1/467 12345\n", "", "1 2", "a b c", "-1 0 0", "1e3 2 3 x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := ParseLoadAvg(s)
		if got == "" {
			return
		}
		if n := len(strings.Fields(got)); n != 3 {
			t.Fatalf("%q: %q has %d fields, want 3", s, got, n)
		}
		if !strings.HasPrefix(strings.Join(strings.Fields(s), " "), got) {
			t.Fatalf("%q: %q is not its first three fields", s, got)
		}
	})
}
