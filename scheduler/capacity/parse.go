package capacity

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Sample is what one scrape of an engine's /metrics said about load.
type Sample struct {
	// Running and Waiting are vllm:num_requests_running and
	// vllm:num_requests_waiting, summed over every series (replicas, models).
	Running float64
	Waiting float64
	// KVUsage is vllm:kv_cache_usage_perc (older vLLM:
	// vllm:gpu_cache_usage_perc), 0..1, the largest over all series: the
	// fullest replica decides.
	KVUsage float64
	// HasRunning, HasWaiting and HasKV say which metrics were present.
	HasRunning, HasWaiting, HasKV bool
	// PrefixQueries and PrefixHits are the prefix cache's counters in
	// tokens (vllm:prefix_cache_queries_total, _hits_total; vLLM before
	// 0.10: vllm:gpu_prefix_cache_…), summed over every series; HasPrefix
	// says they were present.
	PrefixQueries, PrefixHits float64
	HasPrefix                 bool
}

// Metric names read from the engine (vLLM's Prometheus names).
const (
	MetricRunning    = "vllm:num_requests_running"
	MetricWaiting    = "vllm:num_requests_waiting"
	MetricKVUsage    = "vllm:kv_cache_usage_perc"
	MetricKVUsageOld = "vllm:gpu_cache_usage_perc"

	MetricPrefixQueries    = "vllm:prefix_cache_queries_total"
	MetricPrefixHits       = "vllm:prefix_cache_hits_total"
	MetricPrefixQueriesOld = "vllm:gpu_prefix_cache_queries_total"
	MetricPrefixHitsOld    = "vllm:gpu_prefix_cache_hits_total"
)

// maxLine bounds one exposition line; longer lines are an error rather than
// unbounded memory.
const maxLine = 64 << 10

// Parse reads the Prometheus text exposition format and extracts the load
// metrics; other metrics are skipped. It fails on a malformed line of a
// metric it reads (naming the line), on values that are negative or not
// finite, and when none of the metrics is present.
func Parse(data []byte) (Sample, error) {
	var s Sample
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), maxLine)
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" || text[0] == '#' {
			continue
		}
		name, rest := splitName(text)
		var dst *float64
		var has *bool
		kv := false
		switch name {
		case MetricRunning:
			dst, has = &s.Running, &s.HasRunning
		case MetricWaiting:
			dst, has = &s.Waiting, &s.HasWaiting
		case MetricKVUsage, MetricKVUsageOld:
			dst, has, kv = &s.KVUsage, &s.HasKV, true
		case MetricPrefixQueries, MetricPrefixQueriesOld:
			dst, has = &s.PrefixQueries, &s.HasPrefix
		case MetricPrefixHits, MetricPrefixHitsOld:
			dst, has = &s.PrefixHits, &s.HasPrefix
		default:
			continue
		}
		v, err := sampleValue(rest)
		if err != nil {
			return Sample{}, fmt.Errorf("metrics line %d (%s): %w", line, name, err)
		}
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			return Sample{}, fmt.Errorf("metrics line %d (%s): value %v must be finite and not negative", line, name, v)
		}
		if kv {
			*dst = max(*dst, v)
		} else {
			*dst += v
		}
		*has = true
	}
	if err := sc.Err(); err != nil {
		return Sample{}, fmt.Errorf("metrics line %d: %w", line+1, err)
	}
	if !s.HasRunning && !s.HasWaiting && !s.HasKV {
		return Sample{}, fmt.Errorf("metrics: none of %s, %s, %s found", MetricRunning, MetricWaiting, MetricKVUsage)
	}
	return s, nil
}

// splitName splits "name{labels} value ts" into the name and what follows
// it.
func splitName(line string) (string, string) {
	i := strings.IndexAny(line, "{ \t")
	if i < 0 {
		return line, ""
	}
	return line[:i], line[i:]
}

// sampleValue parses "{labels} value [timestamp]" or " value [timestamp]".
func sampleValue(rest string) (float64, error) {
	if strings.HasPrefix(rest, "{") {
		end, err := labelsEnd(rest)
		if err != nil {
			return 0, err
		}
		rest = rest[end:]
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 || len(fields) > 2 {
		return 0, fmt.Errorf("want a value and an optional timestamp, got %q", rest)
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return 0, fmt.Errorf("bad value %q", fields[0])
	}
	return v, nil
}

// labelsEnd returns the index just past the closing brace of a label set,
// honouring quoted values with escapes.
func labelsEnd(s string) (int, error) {
	inQuote := false
	for i := 1; i < len(s); i++ {
		switch c := s[i]; {
		case inQuote && c == '\\':
			i++
		case c == '"':
			inQuote = !inQuote
		case !inQuote && c == '}':
			return i + 1, nil
		}
	}
	return 0, fmt.Errorf("unterminated label set")
}
