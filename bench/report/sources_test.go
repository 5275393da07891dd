package report

import (
	"bytes"
	"strings"
	"testing"

	"github.com/llmesh/llmesh/bench/result"
)

// TestTableSaysWhereNumbersCameFrom: the terminal report names counted
// output tokens, unknown TPOTs and llmesh's own queue-full refusals.
func TestTableSaysWhereNumbersCameFrom(t *testing.T) {
	c := &result.ClassReport{Requests: 5, Violations: result.Violations{TPOTUnknown: 2, QueueFull: 1, Rejected: 1}}
	rep := &result.Report{Classes: map[string]*result.ClassReport{"a": c}, Overall: c,
		OutputTokensSource: map[string]int{result.SourceStream: 3, result.SourceUsage: 1}}
	var b bytes.Buffer
	if err := Table(&b, rep); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"a violations: ttft 0, tpot 0, error 0, rejected 1, preempted 0, queue full 1 (refused by llmesh, not the engine), tpot unknown 2 (counted as misses)",
		"output tokens: 1 requests from the engine's usage, 3 counted from the stream",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
}
