package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llmesh/llmesh/testkit/wait"
)

// startSimMain runs `llmesh sim` in process on a free port with extra
// flags and returns its HTTP base URL; the server stops with the test.
func startSimMain(t *testing.T, extra ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- Main(ctx, append([]string{"sim", "--listen", "127.0.0.1:0"}, extra...), pw, io.Discard)
		pw.Close()
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("sim: %v", err)
		}
	})
	re := regexp.MustCompile(`llmesh sim: http on (http://\S+)`)
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		if m := re.FindStringSubmatch(sc.Text()); m != nil {
			go func() { _, _ = io.Copy(io.Discard, pr) }()
			return m[1]
		}
	}
	t.Fatalf("sim printed no address (%v)", sc.Err())
	return ""
}

// simTTFTSum sends one 2,000-word prompt for one token and returns the
// engine's own TTFT sum (engine-clock seconds, vllm:time_to_first_token_seconds_sum).
func simTTFTSum(t *testing.T, base string) float64 {
	t.Helper()
	prompt := strings.Repeat("word ", 2000)
	body := `{"model":"llama3-8b-h200","prompt":"` + prompt + `","max_tokens":1}`
	res, err := http.Post(base+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("completion: %s", res.Status)
	}
	var v float64
	wait.Poll{Interval: 5 * time.Millisecond}.UntilNil(t, "a TTFT observed", func() error {
		res, err := http.Get(base + "/metrics")
		if err != nil {
			return wait.Stop(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		m := regexp.MustCompile(`(?m)^vllm:time_to_first_token_seconds_sum(?:\{[^}]*\})? (\S+)$`).FindSubmatch(b)
		if m != nil {
			if v, _ = strconv.ParseFloat(string(m[1]), 64); v > 0 {
				return nil
			}
		}
		return fmt.Errorf("metrics:\n%s", b)
	})
	return v
}

// TestSimLongPrefillThreshold: --long-prefill-token-threshold reaches the
// engine. With a cap of 64 tokens per sequence per step a 2,000-token
// prompt is prefilled in 32 steps instead of one, and the engine's own TTFT
// is over three times longer; a negative value is a usage error naming the
// flag.
func TestSimLongPrefillThreshold(t *testing.T) {
	wantUsage(t, mainErr("sim", "--listen", "127.0.0.1:0", "--long-prefill-token-threshold", "-1"),
		"--long-prefill-token-threshold", "-1")
	// Real time (scale 1): a loaded machine's scheduling delays are not
	// multiplied into the engine clock. The model: 58.6 ms for the whole
	// prompt, 32 × 7.9 ms in chunks (llmesh sim predict --prefill 2000, 64).
	whole := simTTFTSum(t, startSimMain(t))
	capped := simTTFTSum(t, startSimMain(t, "--long-prefill-token-threshold", "64"))
	t.Logf("engine TTFT of a 2,000-token prompt: %.1f ms whole, %.1f ms in 64-token chunks", whole*1e3, capped*1e3)
	if capped < 3*whole {
		t.Errorf("TTFT %.1f ms with the threshold, %.1f ms without: the cap did not reach the engine", capped*1e3, whole*1e3)
	}
}
