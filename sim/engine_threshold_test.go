package sim

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// With LongPrefillTokenThreshold a long prompt is cut into chunks of the
// threshold even when the step's budget would take it whole, and a prompt
// queued behind it shares the first step instead of waiting for the long
// prompt's chunks, as in vLLM's V1 scheduler.
func TestEngineLongPrefillThresholdCapsChunks(t *testing.T) {
	e := newTestEngine(t, Config{MaxNumBatchedTokens: 8192, LongPrefillTokenThreshold: 1024})
	if err := e.Add(SeqSpec{ID: 1, PromptTokens: 4000, MaxTokens: 2}); err != nil {
		t.Fatal(err)
	}
	if err := e.Add(SeqSpec{ID: 2, PromptTokens: 300, MaxTokens: 2}); err != nil {
		t.Fatal(err)
	}
	evs, _ := run(t, e, time.Unix(0, 0), 100)
	var chunks1 []int32
	for _, ev := range evs[1] {
		chunks1 = append(chunks1, ev.Scheduled)
	}
	if diff := cmp.Diff([]int32{1024, 1024, 1024, 928, 1}, chunks1); diff != "" {
		t.Errorf("long prompt's chunks (-want +got):\n%s", diff)
	}
	if first := evs[2][0]; first.Scheduled != 300 || !first.Flags.Has(EvFirstToken) {
		t.Errorf("short prompt's first step: %+v, want its 300 tokens and its first token in step one", first)
	}
}

// Without the threshold the same long prompt takes the whole budget.
func TestEngineNoThresholdTakesBudget(t *testing.T) {
	e := newTestEngine(t, Config{MaxNumBatchedTokens: 2048})
	if err := e.Add(SeqSpec{ID: 1, PromptTokens: 4000, MaxTokens: 1}); err != nil {
		t.Fatal(err)
	}
	evs, _ := run(t, e, time.Unix(0, 0), 100)
	var got []int32
	for _, ev := range evs[1] {
		got = append(got, ev.Scheduled)
	}
	if diff := cmp.Diff([]int32{2048, 1952}, got); diff != "" {
		t.Errorf("chunks (-want +got):\n%s", diff)
	}
}

func TestEngineRejectsNegativeThreshold(t *testing.T) {
	if _, err := NewEngine(testProfile(t), Config{LongPrefillTokenThreshold: -1}); err == nil {
		t.Fatal("negative long_prefill_token_threshold accepted")
	}
}
