package proctest

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// StopTimeout is how long a process may take to exit after SIGINT before
// it is killed, which fails its test: every process the suites run shuts
// down gracefully on SIGINT.
const StopTimeout = 20 * time.Second

// stopTimeout is StopTimeout; this package's tests shorten it.
var stopTimeout = StopTimeout

// Proc is a process started by a test. Its output is kept and shown only
// when the test fails.
type Proc struct {
	ending // Name, Done, Err, Exited: the exit status
	cmd    *exec.Cmd
	out    Buffer
}

var _ Runner = (*Proc)(nil)

// Start runs bin with args until the test ends; see StartCmd.
func Start(t testing.TB, name, bin string, args ...string) *Proc {
	t.Helper()
	return StartCmd(t, name, exec.Command(bin, args...))
}

// StartCmd starts cmd (its path, arguments, environment and directory as
// the caller set them; Start sets its output and, on Linux, its process
// group and death signal) and runs it until the test ends. The cleanup
// stops it (SIGINT, then SIGKILL after StopTimeout, which fails the test),
// waits for it, and shows its output when the test failed.
func StartCmd(t testing.TB, name string, cmd *exec.Cmd) *Proc {
	t.Helper()
	p := &Proc{ending: newEnding(name), cmd: cmd}
	cmd.Stdout, cmd.Stderr = &p.out, &p.out
	setProcAttr(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { p.finish(cmd.Wait()) }()
	t.Cleanup(func() {
		if err := p.Stop(); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			args := append([]string{filepath.Base(cmd.Args[0])}, cmd.Args[1:]...)
			t.Logf("---- %s (%s) output ----\n%s", name, strings.Join(args, " "), p.out.String())
		}
	})
	return p
}

// Output is everything the process wrote so far, stdout and stderr
// interleaved.
func (p *Proc) Output() string { return p.out.String() }

// String is Output, so a Proc can be handed to WaitMatch.
func (p *Proc) String() string { return p.out.String() }

// WaitOutput waits until re matches the process's output and returns the
// submatches; it fails the test when the process exits first.
func (p *Proc) WaitOutput(t testing.TB, re *regexp.Regexp) []string {
	t.Helper()
	return WaitMatch(t, p, re, p)
}

// Stop asks the process to shut down (SIGINT) and waits for it; after
// StopTimeout it kills it and says so in the error. A process that has
// exited already is left as it is.
func (p *Proc) Stop() error {
	select {
	case <-p.done:
		return nil
	default:
	}
	_ = interrupt(p.cmd)
	select {
	case <-p.done:
		return nil
	case <-time.After(stopTimeout):
		_ = kill(p.cmd)
		<-p.done
		return fmt.Errorf("%s did not stop within %v of SIGINT; killed it", p.name, stopTimeout)
	}
}

// Command is exec.CommandContext for a process that runs to its end, with
// Start's process attributes: when ctx ends first, the process (on Linux,
// its whole group) is killed.
func Command(ctx context.Context, bin string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, bin, args...)
	setProcAttr(cmd)
	cmd.Cancel = func() error { return kill(cmd) }
	return cmd
}
