package epp_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"testing"

	"github.com/llmesh/llmesh/epp/epptest"
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
