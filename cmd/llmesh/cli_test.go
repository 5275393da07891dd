package main

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/llmesh/llmesh/testkit/proctest"
)

// mainErr runs `llmesh args...` to its end and returns its error; what it
// prints is dropped.
func mainErr(args ...string) error {
	return Main(context.Background(), args, io.Discard, io.Discard)
}

// wantUsage checks that err is a usage error (exit code 2) that names each
// of mentions: every flag problem is reported at once.
func wantUsage(t *testing.T, err error, mentions ...string) {
	t.Helper()
	var ec *exitCode
	if !errors.As(err, &ec) || ec.code != 2 {
		t.Fatalf("err = %v, want exit code 2", err)
	}
	for _, want := range mentions {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

// serving is `llmesh args...` run in process until the test ends or Stop.
type serving struct {
	*proctest.Task
	stdout, stderr proctest.Buffer
}

// serve runs Main with args in its own goroutine; its output is shown when
// the test fails, and no goroutine it started may outlive the test.
func serve(t *testing.T, args ...string) *serving {
	t.Helper()
	// Registered first, so it runs after the task's own cleanup.
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
	s := &serving{}
	proctest.ShowOnFailure(t, "stdout", &s.stdout)
	proctest.ShowOnFailure(t, "stderr", &s.stderr)
	s.Task = proctest.Go(t, "llmesh "+strings.Join(args, " "), func(ctx context.Context) error {
		return Main(ctx, args, &s.stdout, &s.stderr)
	})
	return s
}
