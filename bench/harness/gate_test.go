package harness

import (
	"errors"
	"testing"

	"github.com/llmesh/llmesh/bench/result"
)

func TestGate(t *testing.T) {
	ok := &result.ClassReport{Requests: 10, AttainmentTarget: 0.9, SLOAttainment: 0.95, MeetsTarget: true}
	miss := &result.ClassReport{Requests: 10, AttainmentTarget: 0.9, SLOAttainment: 0.5}
	empty := &result.ClassReport{AttainmentTarget: 0.9}
	for _, tc := range []struct {
		rep  *result.Report
		want error
	}{
		{&result.Report{Valid: true, Classes: map[string]*result.ClassReport{"a": ok, "idle": empty}}, nil},
		{&result.Report{Valid: true, Classes: map[string]*result.ClassReport{"a": ok, "b": miss}}, ErrSLOMissed},
		{&result.Report{Valid: false, InvalidReasons: []string{"lag"}, Classes: map[string]*result.ClassReport{"a": ok}}, ErrInvalid},
	} {
		err := Gate(tc.rep)
		if (tc.want == nil) != (err == nil) || (tc.want != nil && !errors.Is(err, tc.want)) {
			t.Errorf("Gate = %v, want %v", err, tc.want)
		}
	}
}
