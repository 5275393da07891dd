package capacity

import "testing"

// TestParsePrefixCounters: the prefix cache's counters are summed over
// series, under vLLM's current and older names.
func TestParsePrefixCounters(t *testing.T) {
	s, err := Parse([]byte(`# HELP vllm:prefix_cache_queries_total Prefix cache queries.
vllm:num_requests_running{engine="0"} 1
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 1000
vllm:prefix_cache_queries_total{engine="1",model_name="m"} 500
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 300
vllm:gpu_prefix_cache_hits_total{engine="2"} 50
`))
	if err != nil {
		t.Fatal(err)
	}
	if !s.HasPrefix || s.PrefixQueries != 1500 || s.PrefixHits != 350 {
		t.Errorf("prefix counters %+v, want 1500 queried and 350 hit", s)
	}
	s, err = Parse([]byte("vllm:num_requests_running 1\n"))
	if err != nil || s.HasPrefix {
		t.Errorf("without counters: %+v, %v", s, err)
	}
	if _, err := Parse([]byte("vllm:num_requests_running 1\nvllm:prefix_cache_hits_total -3\n")); err == nil {
		t.Error("a negative counter was accepted")
	}
}
