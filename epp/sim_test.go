package epp_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/llmesh/llmesh/epp"
	"github.com/llmesh/llmesh/epp/epptest"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/sim/simtest"
)

// End to end with real engines: the picker picks one of two sims, the
// test (as the data plane) sends the request there and relays the
// streamed response through the picker, which counts the tokens the sim
// reports in its usage and measures TTFT; the client gets the sim's bytes.
func TestAgainstSim(t *testing.T) {
	a, b := simtest.Start(t), simtest.Start(t)
	host := func(s *simtest.Sim) string {
		u, err := url.Parse(s.HTTPURL)
		if err != nil {
			t.Fatal(err)
		}
		return u.Host
	}
	mesh := fmt.Sprintf(`listeners:
  - name: main
    address: 127.0.0.1:8080
    routes: [{name: all, match: {path_prefix: /}, pool: sims}]
pools:
  - name: sims
    protocol: openai
    endpoints: [%s, %s]
    capacity: {max_inflight: 4}
    scheduler: {policy: priority}
classes: [{name: interactive, priority: 0}]
`, host(a), host(b))
	path := filepath.Join(t.TempDir(), "mesh.yaml")
	if err := os.WriteFile(path, []byte(mesh), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startPickerMesh(t, path, nil)
	body := fmt.Sprintf(`{"model":%q,"stream":true,"stream_options":{"include_usage":true},"max_tokens":12,"messages":[{"role":"user","content":"hello there"}]}`, a.Model)
	for i := 0; i < 4; i++ {
		call, pick, err := p.driver(epptest.FullDuplex).Start(ctx(t), epptest.Request{
			Headers: map[string]string{":method": "POST", ":path": "/v1/chat/completions", "content-type": "application/json"},
			Chunks:  split(body, 3)})
		if err != nil || pick.Immediate != nil {
			t.Fatalf("%v %+v", err, pick)
		}
		if pick.Header != host(a) && pick.Header != host(b) {
			t.Fatalf("picked %q, not one of the sims", pick.Header)
		}
		resp, err := http.Post("http://"+pick.Header+"/v1/chat/completions", "application/json", bytes.NewReader(pick.Body))
		if err != nil {
			t.Fatal(err)
		}
		var chunks [][]byte
		var sent []byte
		buf := make([]byte, 512)
		for {
			n, err := resp.Body.Read(buf)
			if n > 0 {
				chunks = append(chunks, append([]byte(nil), buf[:n]...))
				sent = append(sent, buf[:n]...)
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		resp.Body.Close()
		got, err := call.Respond(epptest.Response{Status: resp.StatusCode,
			Headers: map[string]string{"content-type": resp.Header.Get("content-type")}, Chunks: chunks, Served: pick.Header})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, sent) {
			t.Fatalf("client got %d bytes, the sim sent %d", len(got), len(sent))
		}
		r := p.record(t)
		o := r.Observation
		if r.Served != pick.Header || !o.Complete || !o.HasTTFT || o.OutputTokens != 12 || o.CountedTokens == 0 {
			t.Fatalf("record: served %q, complete %v, ttft %v, output tokens %d (%v), counted %d, err %v %s",
				r.Served, o.Complete, o.HasTTFT, o.OutputTokens, o.OutputTokensSource, o.CountedTokens, o.ErrorKind, o.Error)
		}
	}
}

// Preemption end to end: a batch stream from a real sim holds the pool's
// one slot (the sim stalls it after its first token); an interactive
// request whose TTFT objective is at risk arrives, the real scheduler
// preempts the batch stream, and the picker ends its body with an error
// event at once (the test, as Envoy, stops reading the sim there); the
// interactive request gets the slot and completes.
func TestPreemptAgainstSim(t *testing.T) {
	s := simtest.Start(t)
	u, err := url.Parse(s.HTTPURL)
	if err != nil {
		t.Fatal(err)
	}
	mesh := fmt.Sprintf(`pools:
  - name: sims
    protocol: openai
    endpoints: [%s]
    capacity: {max_inflight: 1}
    scheduler: {policy: preemptive, preemption: {min_run_time: 0s}}
classes:
  - {name: interactive, priority: 0, slo: {ttft: 20ms}}
  - {name: batch, priority: 10, preemptible: true}
default_class: batch
`, u.Host)
	path := filepath.Join(t.TempDir(), "mesh.yaml")
	if err := os.WriteFile(path, []byte(mesh), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startPickerMesh(t, path, nil)
	d := p.driver(epptest.FullDuplex)
	req := func(body string, kv ...string) epptest.Request {
		h := map[string]string{":method": "POST", ":path": "/v1/completions", "content-type": "application/json"}
		for i := 0; i+1 < len(kv); i += 2 {
			h[kv[i]] = kv[i+1]
		}
		return epptest.Request{Headers: h, Chunks: [][]byte{[]byte(body)}}
	}
	// forward sends what the picker let through to the picked sim, with
	// the client's headers, as Envoy's router does.
	forward := func(pick epptest.Pick, kv ...string) *http.Response {
		hr, err := http.NewRequest(http.MethodPost, "http://"+pick.Header+"/v1/completions", bytes.NewReader(pick.Body))
		if err != nil {
			t.Fatal(err)
		}
		hr.Header.Set("content-type", "application/json")
		for i := 0; i+1 < len(kv); i += 2 {
			hr.Header.Set(kv[i], kv[i+1])
		}
		resp, err := http.DefaultClient.Do(hr)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}

	batchBody := fmt.Sprintf(`{"model":%q,"prompt":"a batch job","max_tokens":6,"stream":true}`, s.Model)
	stall := []string{"x-llmesh-sim-fault", "stall=2s"}
	call, pick, err := d.Start(ctx(t), req(batchBody, stall...))
	if err != nil || pick.Immediate != nil {
		t.Fatalf("%v %v", err, pick.Immediate)
	}
	resp := forward(pick, stall...)
	started := make(chan struct{})
	relayed := make(chan epptest.Reply, 1)
	go func() {
		rep, err := call.Relay(epptest.Response{Status: resp.StatusCode,
			Headers: map[string]string{"content-type": resp.Header.Get("content-type")},
			Body:    &firstRead{r: resp.Body, c: resp.Body, started: started}})
		if err != nil {
			t.Error(err)
		}
		relayed <- rep
	}()
	<-started

	urgentBody := fmt.Sprintf(`{"model":%q,"prompt":"urgent","max_tokens":2}`, s.Model)
	ucall, upick, err := d.Start(ctx(t), req(urgentBody, epp.ObjectiveHeader, "interactive"))
	if err != nil || upick.Immediate != nil {
		t.Fatalf("%v %v", err, upick.Immediate)
	}
	victim := p.record(t)
	if victim.Class != "batch" || victim.Outcome != scheduler.Preempted || victim.Preemptions != 1 {
		t.Fatalf("victim's record: class %s, outcome %v, preemptions %d", victim.Class, victim.Outcome, victim.Preemptions)
	}
	uresp := forward(upick)
	ub, err := io.ReadAll(uresp.Body)
	uresp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ucall.Respond(epptest.Response{Status: uresp.StatusCode,
		Headers: map[string]string{"content-type": uresp.Header.Get("content-type")}, Chunks: [][]byte{ub}}); err != nil {
		t.Fatal(err)
	}
	urgent := p.record(t)
	if urgent.Class != "interactive" || urgent.Outcome != scheduler.Done || urgent.Status != 200 {
		t.Fatalf("urgent record: class %s, outcome %v, status %d", urgent.Class, urgent.Outcome, urgent.Status)
	}
	rep := <-relayed
	if !rep.EndedByPicker || !strings.Contains(string(rep.Body), "event: error\ndata: ") ||
		!strings.Contains(string(rep.Body), `"type":"preempted"`) {
		t.Fatalf("the batch client got %q (ended by the picker %v)", rep.Body, rep.EndedByPicker)
	}
}

// firstRead closes started after the first read that returned bytes.
type firstRead struct {
	r       io.Reader
	c       io.Closer
	started chan struct{}
	once    bool
}

func (f *firstRead) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	if n > 0 && !f.once {
		f.once = true
		close(f.started)
	}
	return n, err
}

func (f *firstRead) Close() error { return f.c.Close() }
