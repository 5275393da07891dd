package gateway

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/sim/server"
	"github.com/llmesh/llmesh/sim/simtest"
)

// resumeRun streams body through a gateway in front of s whose pool has
// the given resume mode, preempting the first admission at token 5, and
// returns the client's text, its usage, whether it got an error event
// (and that event's type), the releases and the record.
type resumeResult struct {
	text     string
	usage    map[string]int
	errType  string
	releases map[scheduler.Outcome]int
	admits   int
	rec      Record
}

func resumeRun(t *testing.T, s *simtest.Sim, resume Resume, path, body string) resumeResult {
	t.Helper()
	adm := &ctlAdmitter{preemptAt: []int{5}}
	rec := newRecorder()
	_, gw := startGateway(t, Config{Pools: []Pool{{Name: "sim", Upstream: s.HTTPURL, Resume: resume}}}, WithAdmitter(adm), WithRecorder(rec))
	res := post(t, context.Background(), gw+path, body)
	datas, events := readSSE(t, res)
	res.Body.Close()
	var r resumeResult
	var chunks []string
	for i, d := range datas {
		if events[i] == "error" {
			var e struct {
				Error struct {
					Type string `json:"type"`
				} `json:"error"`
			}
			if err := json.Unmarshal([]byte(d), &e); err != nil {
				t.Fatalf("error event %q: %v", d, err)
			}
			r.errType = e.Error.Type
			continue
		}
		chunks = append(chunks, d)
	}
	r.text, _, r.usage = streamText(t, chunks)
	admits, released := adm.snapshot()
	r.admits, r.releases = len(admits), released
	r.rec = rec.next(t)
	return r
}

// TestResumeModesAgainstSim runs a chat stream preempted at token 5
// through the gateway to the real sim under each resume mode:
//   - continue against an engine that ignores continue_final_message (the
//     sim's no-continue-final-message quirk) ends with a retryable
//     "preempted" error event after the text sent before, never repeating
//     it;
//   - continue against an engine that continues gives the whole answer,
//     with usage equal to what the client received;
//   - requeue ends the stream with the retryable error event at the
//     preemption, without a continuation request;
//   - off ignores the preemption: the whole answer, one admission.
//
// The sim runs in real time for the reason TestSpliceAgainstSim gives.
func TestResumeModesAgainstSim(t *testing.T) {
	plain := simtest.Start(t, simtest.WithTimeScale(1))
	quirky := simtest.Start(t, simtest.WithTimeScale(1), simtest.WithConfig(func(c *server.Config) {
		c.Quirks = []string{string(server.QuirkNoContinueFinalMessage)}
	}))
	const path = "/v1/chat/completions"
	body := `{"model":"` + plain.Model + `","messages":[{"role":"user","content":"name sixteen words"}],"max_tokens":16,"stream":true,"stream_options":{"include_usage":true}}`
	res := post(t, context.Background(), plain.HTTPURL+path, body)
	want, _ := readSSE(t, res)
	res.Body.Close()
	wantText, _, wantUsage := streamText(t, want)
	words := strings.Fields(wantText)
	if len(words) != 16 {
		t.Fatalf("reference run produced %q", wantText)
	}

	t.Run("continue, engine restarts", func(t *testing.T) {
		r := resumeRun(t, quirky, ResumeContinue, path, body)
		if r.errType != "preempted" {
			t.Errorf("error event type %q, want preempted", r.errType)
		}
		if !strings.HasPrefix(wantText, r.text) || len(strings.Fields(r.text)) != 5 {
			t.Errorf("client text %q, want the first 5 words of %q and nothing repeated", r.text, wantText)
		}
		if r.usage != nil {
			t.Errorf("usage %v reached the client from a restarted answer", r.usage)
		}
		if diff := cmp.Diff(map[scheduler.Outcome]int{scheduler.Preempted: 1, scheduler.Failed: 1}, r.releases); diff != "" {
			t.Errorf("releases (-want +got):\n%s", diff)
		}
		if r.rec.OK() || r.rec.Preemptions != 1 {
			t.Errorf("record ok=%v (%q) preemptions=%d, want a failed record with 1 preemption", r.rec.OK(), r.rec.Error, r.rec.Preemptions)
		}
	})
	t.Run("continue, engine continues", func(t *testing.T) {
		r := resumeRun(t, plain, ResumeContinue, path, body)
		if r.errType != "" || r.text != wantText {
			t.Errorf("error %q, text %q; want %q", r.errType, r.text, wantText)
		}
		if diff := cmp.Diff(wantUsage, r.usage); diff != "" {
			t.Errorf("usage (-want +got):\n%s", diff)
		}
		if got := r.usage["completion_tokens"]; got != len(strings.Fields(r.text)) {
			t.Errorf("usage completion_tokens %d, client received %d tokens", got, len(strings.Fields(r.text)))
		}
		if r.admits != 2 || r.rec.OutputTokens != 16 {
			t.Errorf("admissions %d, record tokens %d; want 2 and 16", r.admits, r.rec.OutputTokens)
		}
	})
	t.Run("requeue", func(t *testing.T) {
		r := resumeRun(t, plain, ResumeRequeue, path, body)
		if r.errType != "preempted" || !strings.HasPrefix(wantText, r.text) || len(strings.Fields(r.text)) != 5 {
			t.Errorf("error %q, text %q; want a preempted error event after the first 5 words of %q", r.errType, r.text, wantText)
		}
		if diff := cmp.Diff(map[scheduler.Outcome]int{scheduler.Preempted: 1}, r.releases); diff != "" || r.admits != 1 {
			t.Errorf("admissions %d, releases (-want +got):\n%s", r.admits, diff)
		}
	})
	t.Run("off", func(t *testing.T) {
		r := resumeRun(t, plain, ResumeOff, path, body)
		if r.errType != "" || r.text != wantText {
			t.Errorf("error %q, text %q; want %q", r.errType, r.text, wantText)
		}
		if diff := cmp.Diff(wantUsage, r.usage); diff != "" {
			t.Errorf("usage (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(map[scheduler.Outcome]int{scheduler.Done: 1}, r.releases); diff != "" || r.admits != 1 {
			t.Errorf("admissions %d, releases (-want +got):\n%s", r.admits, diff)
		}
		if !r.rec.OK() || r.rec.Preemptions != 0 {
			t.Errorf("record ok=%v (%q) preemptions=%d", r.rec.OK(), r.rec.Error, r.rec.Preemptions)
		}
	})
}

// TestResumeConfig: an unknown resume mode is refused naming the pool's
// field and the value.
func TestResumeConfig(t *testing.T) {
	_, err := New(Config{Pools: []Pool{{Name: "p", Upstream: "http://127.0.0.1:1", Resume: "later"}}})
	if err == nil || !strings.Contains(err.Error(), `pools[0].resume: "later" must be continue, requeue or off`) {
		t.Errorf("New = %v, want the pools[0].resume error", err)
	}
}

// TestResumeFromMesh: pools[].preemption.resume reaches the gateway's pool
// (continue, the default, as the empty Resume).
func TestResumeFromMesh(t *testing.T) {
	for _, tc := range []struct {
		line string
		want Resume
	}{{"", ""}, {"    preemption: {resume: continue}\n", ""}, {"    preemption: {resume: requeue}\n", ResumeRequeue}, {"    preemption: {resume: off}\n", ResumeOff}} {
		mesh, err := config.Load([]byte(`
listeners:
  - name: main
    address: 127.0.0.1:8080
    routes: [{pool: sim}]
pools:
  - name: sim
    protocol: openai
    endpoints: [127.0.0.1:8000]
` + tc.line))
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := ConfigFromMesh(mesh, "")
		if err != nil {
			t.Fatal(err)
		}
		if got := cfg.Pools[0].Resume; got != tc.want {
			t.Errorf("%q: Resume %q, want %q", tc.line, got, tc.want)
		}
	}
}

// TestCompletionsContinuationRestartCheck: a completions continuation on
// an engine that answers the continuation prompt from the start (here one
// that ignores the prompt) would repeat the text the client already has;
// the restart check ends the stream with the retryable "preempted" error
// event instead, after the text sent before, nothing repeated.
func TestCompletionsContinuationRestartCheck(t *testing.T) {
	up := httptest.NewServer(sseUpstream(20, 5*time.Millisecond))
	t.Cleanup(up.Close)
	adm := &ctlAdmitter{preemptAt: []int{5}}
	_, gw := startGateway(t, Config{Pools: []Pool{{Name: "sim", Upstream: up.URL}}}, WithAdmitter(adm))
	res := post(t, context.Background(), gw+"/v1/completions", `{"model":"m","prompt":"hello","max_tokens":20,"stream":true}`)
	datas, events := readSSE(t, res)
	res.Body.Close()
	if len(events) == 0 || events[len(events)-1] != "error" || !strings.Contains(datas[len(datas)-1], `"type":"preempted"`) {
		t.Fatalf("stream ended with %q, want a preempted error event", datas)
	}
	text, _, _ := streamText(t, datas[:len(datas)-1])
	if text != "tatbtctdte" {
		t.Errorf("client text %q, want the first 5 tokens once (tatbtctdte)", text)
	}
}
