package proctest

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// Main is a TestMain body: it runs the package's tests, then each of after
// in order (remove built binaries, close idle connections to processes that
// are gone), and, when every test passed, fails the run if any goroutine is
// left over — a process waiter, a pipe copier, a sampler that outlived its
// test. It exits the test binary.
func Main(m *testing.M, after ...func()) {
	code := m.Run()
	for _, f := range after {
		f()
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: Errors on successful test run: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
