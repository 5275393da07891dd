package proctest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"
)

// Builder builds Go packages into one temporary directory, each binary at
// most once per test binary, so every test that needs `llmesh` shares one
// build. The zero value is ready to use; Close removes what it built.
type Builder struct {
	// Env is added to the environment of every `go build` (for example
	// CGO_ENABLED=1 for a c-shared library).
	Env []string

	mu    sync.Mutex
	dir   string
	built map[string]build
}

type build struct {
	args []string
	path string
	err  error
}

// Build runs `go build -o DIR/name args...` (args: build flags, then the
// package, relative to the test's package directory) the first time name
// is asked for, and returns the output's path. A failed build fails this
// test and every later one that asks for name, each showing the compiler's
// output.
func (b *Builder) Build(t testing.TB, name string, args ...string) string {
	t.Helper()
	path, err := b.build(name, args)
	if err != nil {
		t.Fatal(err)
	}
	return path
}

func (b *Builder) build(name string, args []string) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if r, ok := b.built[name]; ok {
		if !slices.Equal(r.args, args) {
			return "", fmt.Errorf("proctest: %s built with %q, asked again with %q", name, r.args, args)
		}
		return r.path, r.err
	}
	if b.dir == "" {
		dir, err := os.MkdirTemp("", "proctest-bin-")
		if err != nil {
			return "", err
		}
		b.dir = dir
		b.built = map[string]build{}
	}
	r := build{args: slices.Clone(args), path: filepath.Join(b.dir, name)}
	cmd := exec.Command("go", append([]string{"build", "-o", r.path}, args...)...)
	cmd.Env = append(os.Environ(), b.Env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		r.err = fmt.Errorf("go build -o %s %q: %w\n%s", name, args, err, out)
	}
	b.built[name] = r
	return r.path, r.err
}

// Close removes everything b built.
func (b *Builder) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.dir != "" {
		_ = os.RemoveAll(b.dir)
		b.dir, b.built = "", nil
	}
}
