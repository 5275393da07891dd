package filter

import (
	"encoding/json"
	"testing"
)

func TestOpenAIRequestSizing(t *testing.T) {
	for _, tc := range []struct {
		body          string
		limit, prompt int
	}{
		{`{"prompt":"abcdef","max_tokens":7}`, 7, 2},                                          // 8 bytes with quotes
		{`{"messages":[{"content":"ab"},{"content":"abc"}],"max_completion_tokens":3}`, 3, 3}, // 4 + 5 bytes
		{`{"max_tokens":5,"max_completion_tokens":9}`, 5, 0},
		{`{"max_tokens":-2}`, -2, 0},
		{`{}`, 0, 0},
	} {
		var r OpenAIRequest
		if err := json.Unmarshal([]byte(tc.body), &r); err != nil {
			t.Fatal(err)
		}
		if got := r.OutputLimit(); got != tc.limit {
			t.Errorf("%s: OutputLimit %d, want %d", tc.body, got, tc.limit)
		}
		if got := r.PromptTokens(); got != tc.prompt {
			t.Errorf("%s: PromptTokens %d, want %d", tc.body, got, tc.prompt)
		}
	}
}
