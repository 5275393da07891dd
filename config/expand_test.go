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
		// Comments are neither expanded nor flagged; values are.
		{"# ${NOPE} is the engine\na: ${LLMESH_SIM}", "# ${NOPE} is the engine\na: 127.0.0.1:8000", ""},
		{"  # indented ${NOPE}\r\na: 1", "  # indented ${NOPE}\r\na: 1", ""},
		{"a: ${LLMESH_SIM} # or ${NOPE}, ${LLMESH_SIM}", "a: 127.0.0.1:8000 # or ${NOPE}, ${LLMESH_SIM}", ""},
		{"a: [${LLMESH_SIM}]\t# ${NOPE}", "a: [127.0.0.1:8000]\t# ${NOPE}", ""},
		{"url: http://h/#${LLMESH_SIM}", "url: http://h/#127.0.0.1:8000", ""},
		{"# $${X} stays as written\n", "# $${X} stays as written\n", ""},
		// A # inside a quoted scalar is no comment.
		{`a: "x # ${LLMESH_SIM}" # ${NOPE}`, `a: "x # 127.0.0.1:8000" # ${NOPE}`, ""},
		{`a: 'it''s # ${LLMESH_SIM}' # ${NOPE}`, `a: 'it''s # 127.0.0.1:8000' # ${NOPE}`, ""},
		{`a: "q \" # ${LLMESH_SIM}"`, `a: "q \" # 127.0.0.1:8000"`, ""},
		{"a: \"two\n # lines ${LLMESH_SIM}\"\n# ${NOPE}", "a: \"two\n # lines 127.0.0.1:8000\"\n# ${NOPE}", ""},
		// An apostrophe inside a plain scalar opens no quote.
		{"a: don't # ${NOPE}\nb: ${LLMESH_SIM}", "a: don't # ${NOPE}\nb: 127.0.0.1:8000", ""},
		// A block scalar's lines are values, even those starting with #.
		{"s: |\n  # ${LLMESH_SIM}\n\n  x\n# ${NOPE}\nb: 1", "s: |\n  # 127.0.0.1:8000\n\n  x\n# ${NOPE}\nb: 1", ""},
		{"- >-\n  # ${NOPE}", "", "line 2: ${NOPE} is not set"},
		{"s: |2 # header comment ${NOPE}\n   # ${LLMESH_SIM}", "s: |2 # header comment ${NOPE}\n   # 127.0.0.1:8000", ""},
		{"a: x|\n# ${NOPE}", "a: x|\n# ${NOPE}", ""},
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

// A shipped mesh documents ${LLMESH_SIM} in its comments; with the
// variable unset, only the values' placeholders are named.
func TestExpandEnvCommentLine(t *testing.T) {
	in := []byte("# LLMESH_SIM=127.0.0.1:8000 llmesh gateway --config FILE\n# ${LLMESH_SIM} is the engine's host:port\npools:\n  - name: p # at ${LLMESH_SIM}\n    endpoints: [${LLMESH_SIM}]\n")
	_, err := ExpandEnv(in, func(string) (string, bool) { return "", false })
	if err == nil || err.Error() != "line 5: ${LLMESH_SIM} is not set in the environment (write $${ for a literal ${)" {
		t.Fatalf("err %v, want only line 5 named", err)
	}
	comments := []byte("# ${LLMESH_SIM} is the engine's host:port\npools: []\n")
	out, err := ExpandEnv(comments, func(string) (string, bool) { return "", false })
	if err != nil || string(out) != string(comments) {
		t.Fatalf("%q, %v; want the file unchanged", out, err)
	}
}

func FuzzExpandEnv(f *testing.F) {
	for _, s := range []string{"${A}", "$${A}", "x: ${A_1} $", "${", "${}", "${A", "# ${A}\na: ${A}", "a: \"# ${A}\" # ${A}", "s: |\n  # ${A}\n", "a: 'x''y' # ${A}"} {
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
