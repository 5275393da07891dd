package gateway

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv(benchProxyEnv) != "" { // a proxy for BenchmarkProxyProcessCPU
		os.Exit(benchProxyMain())
	}
	goleak.VerifyTestMain(m)
}

// recorder collects Records.
type recorder struct{ ch chan Record }

func newRecorder() *recorder { return &recorder{ch: make(chan Record, 64)} }

func (r *recorder) Record(rec Record) { r.ch <- rec }

// next waits for the next record.
func (r *recorder) next(t testing.TB) Record {
	t.Helper()
	select {
	case rec := <-r.ch:
		return rec
	case <-time.After(20 * time.Second):
		t.Fatal("no record within 20s")
	}
	return Record{}
}

// startGateway serves a gateway on 127.0.0.1:0 until the test ends.
func startGateway(t testing.TB, cfg Config, opts ...Option) (*Gateway, string) {
	t.Helper()
	g, err := New(cfg, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Serve(ctx, ln, 5*time.Second) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
		g.Close()
	})
	return g, "http://" + ln.Addr().String()
}

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
