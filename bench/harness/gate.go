package harness

import (
	"errors"
	"fmt"
	"sort"

	"github.com/llmesh/llmesh/bench/result"
)

// Exit codes of the bench commands, documented in docs/bench.md.
const (
	ExitOK = 0
	// ExitError: the run or command failed (bad input, unreachable
	// target with nothing completed, I/O).
	ExitError = 1
	// ExitUsage: bad flags.
	ExitUsage = 2
	// ExitSLO: --slo-gate and a class missed its attainment target.
	ExitSLO = 3
	// ExitInvalid: --slo-gate and the run itself is invalid (the harness
	// fell behind its schedule or nothing completed), so the gate cannot
	// judge.
	ExitInvalid = 4
)

// ErrSLOMissed and ErrInvalid are what Gate returns.
var (
	ErrSLOMissed = errors.New("SLO gate: attainment target missed")
	ErrInvalid   = errors.New("SLO gate: run invalid")
)

// Gate checks every class's attainment against its target. It returns nil
// when all pass, ErrInvalid (wrapped with reasons) for an invalid run, or
// ErrSLOMissed wrapped with the classes that missed.
func Gate(rep *result.Report) error {
	if !rep.Valid {
		return fmt.Errorf("%w: %v", ErrInvalid, rep.InvalidReasons)
	}
	var missed []string
	for name, c := range rep.Classes {
		if c.Requests > 0 && c.AttainmentTarget > 0 && !c.MeetsTarget {
			missed = append(missed, fmt.Sprintf("%s %.1f%% < %.1f%%", name, 100*c.SLOAttainment, 100*c.AttainmentTarget))
		}
	}
	if len(missed) > 0 {
		sort.Strings(missed)
		return fmt.Errorf("%w: %v", ErrSLOMissed, missed)
	}
	return nil
}
