package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// simPrefixHits sends one 1,000-word prompt twice and returns the
// engine's vllm:prefix_cache_hits_total.
func simPrefixHits(t *testing.T, base string) float64 {
	t.Helper()
	body := `{"prompt":"` + strings.Repeat("word ", 1000) + `","max_tokens":1}`
	for range 2 {
		res, err := http.Post(base+"/v1/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("completion: %s", res.Status)
		}
	}
	res, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	m := regexp.MustCompile(`(?m)^vllm:prefix_cache_hits_total(?:\{[^}]*\})? (\S+)$`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("no vllm:prefix_cache_hits_total in\n%s", b)
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	return v
}

// TestSimPrefixCachingFlags: prefix caching is on by default, and of
// --enable-prefix-caching and --no-enable-prefix-caching the later wins,
// as with vLLM's flags; a bad value is a usage error naming the flag.
func TestSimPrefixCachingFlags(t *testing.T) {
	var stderr bytes.Buffer
	err := Main(context.Background(), []string{"sim", "--listen", "127.0.0.1:0", "--enable-prefix-caching=maybe"}, io.Discard, &stderr)
	var ec *exitCode
	if !errors.As(err, &ec) || ec.code != 2 || !strings.Contains(err.Error(), "--enable-prefix-caching") {
		t.Errorf("bad value: err %v, stderr %q", err, stderr.String())
	}
	const cached = 999 / 16 * 16 // all blocks but the one with the last token
	for _, tc := range []struct {
		flags []string
		want  float64
	}{
		{nil, cached},
		{[]string{"--no-enable-prefix-caching"}, 0},
		{[]string{"--enable-prefix-caching", "--no-enable-prefix-caching"}, 0},
		{[]string{"--no-enable-prefix-caching", "--enable-prefix-caching"}, cached},
		{[]string{"--enable-prefix-caching=false"}, 0},
	} {
		if got := simPrefixHits(t, startSimMain(t, append(tc.flags, "--time-scale", "50")...)); got != tc.want {
			t.Errorf("%q: %v hit tokens, want %v", tc.flags, got, tc.want)
		}
	}
}
