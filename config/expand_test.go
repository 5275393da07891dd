package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestExpandEnv(t *testing.T) {
	env := map[string]string{"LLMESH_SIM": "127.0.0.1:8000", "EMPTY": ""}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	for _, tc := range []struct{ in, want, err string }{
		{"endpoints: [${LLMESH_SIM}]", "endpoints: [127.0.0.1:8000]", ""},
		{"url: http://${LLMESH_SIM}/metrics # $5 and $x stay", "url: http://127.0.0.1:8000/metrics # $5 and $x stay", ""},
		{"a: ${EMPTY}b", "a: b", ""},
		{"literal: $${LLMESH_SIM}", "literal: ${LLMESH_SIM}", ""},
		{"not a name: ${1X} ${a-b} ${", "not a name: ${1X} ${a-b} ${", ""},
		{"a: 1\nb: ${NOPE}\nc: ${ALSO_NOT}", "", "line 2: ${NOPE} is not set in the environment; line 3: ${ALSO_NOT} is not set"},
	} {
		got, err := ExpandEnv([]byte(tc.in), lookup)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: err %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || string(got) != tc.want {
			t.Errorf("%q: %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

// The shipped embedded-mode meshes load as files once their variable is
// set, and name it when it is not.
func TestLoadFileExpandsEnv(t *testing.T) {
	path := filepath.Join("..", "bench", "meshes", "fifo.yaml")
	t.Setenv("LLMESH_SIM", "127.0.0.1:8000")
	c, err := LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Pools[0].Endpoints[0].Address(); got != "127.0.0.1:8000" {
		t.Errorf("endpoint %s", got)
	}
	os.Unsetenv("LLMESH_SIM")
	if _, err := LoadFile(path); err == nil || !strings.Contains(err.Error(), "${LLMESH_SIM} is not set in the environment") {
		t.Errorf("without the variable: %v", err)
	}
}

func FuzzExpandEnv(f *testing.F) {
	for _, s := range []string{"${A}", "$${A}", "x: ${A_1} $", "${", "${}", "${A"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out, err := ExpandEnv([]byte(s), func(k string) (string, bool) { return "v", true })
		if err != nil {
			t.Fatalf("every variable set, yet %v", err)
		}
		if !strings.Contains(s, "${") && string(out) != s {
			t.Fatalf("%q without ${ became %q", s, out)
		}
	})
}
