package gatewayproc

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/llmesh/llmesh/sim/simtest"
)

// The helpers below are the gateway package's test helpers of the same
// names (gateway/helpers_test.go, sched_test.go, endpoint_test.go): the
// tests here send the same requests to a whole gateway process.

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// readSSE reads a whole event stream and returns the data payloads and the
// event names (empty for plain data events).
func readSSE(t testing.TB, res *http.Response) (datas, events []string) {
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

// sseUpstream serves n completion chunks then [DONE], flushing each.
func sseUpstream(n int, gap time.Duration) http.HandlerFunc {
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

func post(t testing.TB, ctx context.Context, url, body string) *http.Response {
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

func mustReq(ctx context.Context, url, body string) *http.Request {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		panic(err)
	}
	return req
}

func completion(model string, tokens int) string {
	return `{"model":"` + model + `","prompt":"hello there","max_tokens":` + strconv.Itoa(tokens) + `,"stream":true}`
}

// simMetric reads one series' value from a sim's own /metrics.
func simMetric(t *testing.T, s *simtest.Sim, name string) float64 {
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
