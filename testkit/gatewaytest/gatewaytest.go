// Package gatewaytest holds the request helpers that the gateway's own
// tests and the gateway process tests (cmd/llmesh/gatewayproc) share: SSE
// reading, a scripted SSE upstream, completion requests, a sim's metric and
// the experiment mesh. It imports neither package, so both may use it.
package gatewaytest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llmesh/llmesh/sim/simtest"
)

// ReadSSE reads a whole event stream and returns the data payloads and the
// event names (empty for plain data events).
func ReadSSE(t testing.TB, res *http.Response) (datas, events []string) {
	t.Helper()
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	var ev string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			ev = ""
		case strings.HasPrefix(line, "event:"):
			ev = strings.TrimSpace(line[6:])
		case strings.HasPrefix(line, "data:"):
			datas = append(datas, strings.TrimSpace(line[5:]))
			events = append(events, ev)
		}
	}
	return datas, events
}

// SSEUpstream serves n completion chunks then [DONE], flushing each.
func SSEUpstream(n int, gap time.Duration) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		f := w.(http.Flusher)
		f.Flush()
		for i := 0; i < n; i++ {
			if gap > 0 {
				select {
				case <-time.After(gap):
				case <-r.Context().Done():
					return
				}
			}
			_, _ = w.Write([]byte(`data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":"t` + string(rune('a'+i%26)) + `","finish_reason":null}]}` + "\n\n"))
			f.Flush()
		}
		_, _ = w.Write([]byte(`data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":"","finish_reason":"length"}],"usage":{"prompt_tokens":3,"completion_tokens":` + strconv.Itoa(n) + `,"total_tokens":` + strconv.Itoa(n+3) + `}}` + "\n\n"))
		_, _ = w.Write([]byte("data: [DONE]\n\n"))
		f.Flush()
	}
}

// Post sends body as JSON to url and returns the response (the caller closes it).
func Post(t testing.TB, ctx context.Context, url, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	return res
}

// SimMetric reads one series' value from a sim's own /metrics.
func SimMetric(t *testing.T, s *simtest.Sim, name string) float64 {
	t.Helper()
	res, err := http.Get(s.HTTPURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, name+"{") || strings.HasPrefix(line, name+" ") {
			f := strings.Fields(line)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			return v
		}
	}
	return 0
}

// Completion is a streamed completion request body for model.
func Completion(model string, tokens int) string {
	return `{"model":"` + model + `","prompt":"hello there","max_tokens":` + strconv.Itoa(tokens) + `,"stream":true}`
}

// ExpMesh is a mesh with one pool on ENGINE split by experiment "ab" into
// arm "fifo" (weight 3, header x-arm: fifo) and arm "prio" (weight 1,
// header x-arm: prio, policy priority). Requests with x-class: urgent take
// the urgent class, others batch. EXTRA is appended to the experiment.
const ExpMesh = `listeners:
  - name: main
    address: 127.0.0.1:1
    routes:
      - {name: urgent, match: {path_prefix: /v1/, headers: {x-class: urgent}}, pool: sim, class: urgent}
      - {name: rest, match: {path_prefix: /v1/}, pool: sim, class: batch}
pools:
  - name: sim
    protocol: openai
    endpoints: [ENGINE]
    capacity: {max_inflight: 1}
    scheduler: {policy: fifo}
classes:
  - {name: urgent, priority: 0}
  - {name: batch, priority: 10}
default_class: batch
experiments:
  - name: ab
    pool: sim
    arms:
      - {name: fifo, weight: 3, headers: {x-arm: fifo}}
      - {name: prio, weight: 1, headers: {x-arm: prio}, scheduler: {policy: priority}}
EXTRA`

func ExpMeshFor(s *simtest.Sim, extra string) string {
	m := strings.Replace(ExpMesh, "ENGINE", strings.TrimPrefix(s.HTTPURL, "http://"), 1)
	return strings.Replace(m, "EXTRA", extra, 1)
}

// armHeader is gateway.ArmHeader (this package cannot import gateway: its
// internal tests import this package).
const armHeader = "X-Llmesh-Arm"

// Complete sends one short streamed completion and returns the arm header
// and the HTTP status, after reading the whole stream.
func Complete(t *testing.T, ctx context.Context, url, model string, maxTokens int, hdr map[string]string) (arm string, status int) {
	t.Helper()
	body := fmt.Sprintf(`{"model":%q,"prompt":"one two three","max_tokens":%d,"stream":true}`, model, maxTokens)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("POST: %v", err)
		return "", 0
	}
	defer res.Body.Close()
	if _, err := io.Copy(io.Discard, res.Body); err != nil {
		t.Errorf("reading the stream: %v", err)
	}
	return res.Header.Get(armHeader), res.StatusCode
}

// MustReq builds a POST of body to url; it panics on a malformed URL.
func MustReq(ctx context.Context, url, body string) *http.Request {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		panic(err)
	}
	return req
}

// RelocMesh is a mesh with one llm.v1 pool on [SIM] whose Generate calls
// carry their prompt in metadata x-prompt-raw, relocated into field 2
// from 4 KiB up to 4 MiB.
const RelocMesh = `listeners:
  - name: main
    address: 127.0.0.1:1
    routes:
      - match: {path_prefix: /llm.v1.Generation/}
        pool: engine
pools:
  - name: engine
    protocol: grpc
    endpoints: [SIM]
classes:
  - {name: interactive, priority: 0}
default_class: interactive
relocation:
  grpc:
    - {method: /llm.v1.Generation/Generate, metadata: x-prompt-raw, field: 2, threshold: 4096, max: 4194304}
`
