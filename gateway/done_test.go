package gateway

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/llmesh/llmesh/exchange"
	"github.com/llmesh/llmesh/scheduler"
)

// TestClientCloseAfterDoneIsDone: clients close the connection as soon as
// they read [DONE]. When that close reaches the gateway before the
// upstream's end of stream, the request was still served completely and
// must be released and recorded as done, not cancelled.
func TestClientCloseAfterDoneIsDone(t *testing.T) {
	upstreamSawClose := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, ev := range []string{
			`{"choices":[{"text":"a"}]}`,
			`{"choices":[{"text":"b"}]}`,
			`{"choices":[{"text":"","finish_reason":"length"}],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}`,
			`[DONE]`,
		} {
			_, _ = io.WriteString(w, "data: "+ev+"\n\n")
		}
		w.(http.Flusher).Flush()
		// Keep the response open, as an engine still tearing its stream
		// down would, until the gateway gives up on it.
		<-r.Context().Done()
		close(upstreamSawClose)
	}))
	defer up.Close()
	adm := &ctlAdmitter{}
	rec := newRecorder()
	_, gw := startGateway(t, Config{Pools: []Pool{{Name: "p", Upstream: up.URL}}}, WithAdmitter(adm), WithRecorder(rec))
	res := post(t, context.Background(), gw+"/v1/completions", `{"prompt":"x","stream":true}`)
	sc := bufio.NewScanner(res.Body)
	sawDone := false
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == "data: [DONE]" {
			sawDone = true
			break
		}
	}
	if !sawDone {
		t.Fatalf("stream ended without [DONE]: %v", sc.Err())
	}
	res.Body.Close() // the client goes away right after [DONE]
	r := rec.next(t)
	<-upstreamSawClose
	if r.Outcome != scheduler.Done {
		t.Errorf("outcome %v, want done: the client read the whole stream", r.Outcome)
	}
	if r.ErrorKind != exchange.ErrorNone || !r.Complete || r.OutputTokens != 2 {
		t.Errorf("observation: error %v %q, complete %v, output tokens %d; want a clean complete stream of 2 tokens",
			r.ErrorKind, r.Observation.Error, r.Complete, r.OutputTokens)
	}
	if r.Err != nil {
		t.Errorf("record error %v, want none", r.Err)
	}
	_, released := adm.snapshot()
	if diff := cmp.Diff(map[scheduler.Outcome]int{scheduler.Done: 1}, released); diff != "" {
		t.Errorf("releases (-want +got):\n%s", diff)
	}
}
