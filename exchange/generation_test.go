package exchange

import "testing"

func TestGenerations(t *testing.T) {
	custom := newGenerations([]string{"/v1/embeddings", "/v1/completions"})
	for _, tc := range []struct {
		g            *Generations
		method, path string
		want         bool
	}{
		{nil, "POST", "/v1/completions", true},
		{nil, "POST", "/v1/chat/completions", true},
		{nil, "POST", MethodLLMV1, true},
		{nil, "POST", MethodVLLM, true},
		{nil, "GET", "/v1/models", false},
		{nil, "GET", "/health", false},
		{nil, "POST", "/tokenize", false},
		{nil, "POST", "/v1/embeddings", false},
		{nil, "GET", "/v1/completions", false},
		{nil, "POST", "/grpc.health.v1.Health/Check", false},
		{newGenerations(nil), "POST", "/v1/completions", true},
		{custom, "POST", "/v1/embeddings", true},
		{custom, "POST", "/v1/completions", true},
		{custom, "POST", "/v1/chat/completions", false},
	} {
		if got := tc.g.Match(tc.method, tc.path); got != tc.want {
			t.Errorf("%v.Match(%s, %s) = %v, want %v", tc.g, tc.method, tc.path, got, tc.want)
		}
	}
}
