package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/policy"
	"github.com/llmesh/llmesh/sim/simtest"
	"github.com/llmesh/llmesh/testkit/proctest"
)

// migrationMesh is two real-time sims (same model and seed, so the same
// deterministic answers), each behind a killable front, and a gateway pool
// over the fronts scheduled by a FIFO scheduler.
type migrationMesh struct {
	fronts [2]*proctest.Killable
	sims   [2]*simtest.Sim
	g      *Gateway
	gw     string
	sched  *scheduler.Scheduler
}

func newMigrationMesh(t *testing.T, resume Resume) *migrationMesh {
	t.Helper()
	m := &migrationMesh{}
	var eps []string
	for i := range m.sims {
		m.sims[i] = simtest.Start(t, simtest.WithTimeScale(1))
		m.fronts[i] = proctest.NewKillable(t, strings.TrimPrefix(m.sims[i].HTTPURL, "http://"))
		m.fronts[i].Reset = true
		eps = append(eps, m.fronts[i].Addr())
	}
	fifo, err := policy.Lookup("fifo")
	if err != nil {
		t.Fatal(err)
	}
	m.sched, err = scheduler.New(scheduler.Config{
		Pools: []scheduler.PoolConfig{{Name: "sim", MaxInflight: 16, Policy: fifo,
			Endpoints: []scheduler.EndpointConfig{{Name: eps[0]}, {Name: eps[1]}}}},
		Classes: []scheduler.ClassConfig{{Name: "default"}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.sched.Close() })
	m.g, m.gw = startGateway(t, Config{Pools: []Pool{{Name: "sim", Upstream: "http://" + eps[0], Endpoints: eps, Resume: resume}},
		Limits: Limits{MaxConnsPerClient: 4096}},
		WithAdmitter(m.sched))
	return m
}

// serving is the index of the endpoint holding the one request in flight.
func (m *migrationMesh) serving(t *testing.T) int {
	t.Helper()
	for i, ep := range m.sched.Stats()[0].Endpoints {
		if ep.InFlight == 1 {
			return i
		}
	}
	t.Fatalf("no endpoint holds the request: %+v", m.sched.Stats()[0].Endpoints)
	return -1
}

// sseReader reads one event at a time.
type sseReader struct{ r *bufio.Reader }

// next returns the next event's name and data; ok is false at the body's end.
func (s sseReader) next() (event, data string, ok bool) {
	for {
		line, err := s.r.ReadString('\n')
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == "" && (data != "" || event != ""):
			return event, data, true
		case strings.HasPrefix(line, "event:"):
			event = strings.TrimSpace(line[6:])
		case strings.HasPrefix(line, "data:"):
			data = strings.TrimSpace(line[5:])
		}
		if err != nil {
			return event, data, data != ""
		}
	}
}

// cutRun streams body through m, kills the front serving it after `before`
// data events, then (when killSecond) the front serving the continuation
// after `before` more, and returns the data events and event names the
// client received.
func cutRun(t *testing.T, m *migrationMesh, path, body string, before int, killSecond bool) (datas, events []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res := post(t, ctx, m.gw+path, body)
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(res.Body)
		t.Fatalf("status %d: %s", res.StatusCode, b)
	}
	rd := sseReader{bufio.NewReader(res.Body)}
	for n := 0; ; n++ {
		if n == before || (killSecond && n == 2*before) {
			m.fronts[m.serving(t)].Kill()
		}
		ev, data, ok := rd.next()
		if !ok {
			break
		}
		datas, events = append(datas, data), append(events, ev)
	}
	return datas, events
}

// TestMigrateCutStream kills the engine replica serving a stream after 5
// tokens reached the client: the gateway continues the stream on the other
// replica, and the client receives exactly the tokens, id and usage of an
// uninterrupted run, with no error event, in one stream. The continuation
// was admitted on the live endpoint and the cut counted against the dead
// one.
func TestMigrateCutStream(t *testing.T) {
	for _, tc := range []struct{ name, path, body string }{
		{"completions", "/v1/completions", `{"model":"MODEL","prompt":"the quick brown fox jumps over","max_tokens":40,"stream":true,"stream_options":{"include_usage":true}}`},
		{"chat", "/v1/chat/completions", `{"model":"MODEL","messages":[{"role":"user","content":"name forty words"}],"max_tokens":40,"stream":true,"stream_options":{"include_usage":true}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMigrationMesh(t, ResumeContinue)
			tc.body = strings.ReplaceAll(tc.body, "MODEL", m.sims[0].Model)
			res := post(t, context.Background(), m.sims[1].HTTPURL+tc.path, tc.body)
			want, _ := readSSE(t, res)
			res.Body.Close()
			wantText, _, wantUsage := streamText(t, want)
			if len(strings.Fields(wantText)) != 40 {
				t.Fatalf("reference run produced %q", wantText)
			}
			datas, events := cutRun(t, m, tc.path, tc.body, 5, false)
			for i, e := range events {
				if e == "error" {
					t.Fatalf("error event %d: %s", i, datas[i])
				}
			}
			gotText, ids, gotUsage := streamText(t, datas)
			if gotText != wantText {
				t.Errorf("migrated text\n got %q\nwant %q", gotText, wantText)
			}
			if len(ids) != 1 {
				t.Errorf("ids %v, want one", ids)
			}
			if diff := cmp.Diff(wantUsage, gotUsage); diff != "" {
				t.Errorf("usage (-want +got):\n%s", diff)
			}
			if datas[len(datas)-1] != "[DONE]" {
				t.Errorf("last event %q, want [DONE]", datas[len(datas)-1])
			}
			if got := m.g.Migrations(); got != 1 {
				t.Errorf("migrations %d, want 1", got)
			}
			st := m.sched.Stats()[0]
			if st.Endpoints[0].Admitted+st.Endpoints[1].Admitted != 2 || st.Endpoints[0].Admitted != 1 {
				t.Errorf("admissions per endpoint %d, %d; want one on each", st.Endpoints[0].Admitted, st.Endpoints[1].Admitted)
			}
		})
	}
}

// errorEventType is the OpenAI error type of the last event when it is an
// error event, "" otherwise.
func errorEventType(t *testing.T, datas, events []string) string {
	t.Helper()
	if len(events) == 0 || events[len(events)-1] != "error" {
		return ""
	}
	var e struct {
		Error struct {
			Type string `json:"type"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(datas[len(datas)-1]), &e); err != nil {
		t.Fatalf("error event %q: %v", datas[len(datas)-1], err)
	}
	return e.Error.Type
}

// TestMigrateOnce: a stream migrates at most once. When the replica
// serving its continuation dies too, and when the pool does not continue
// streams (resume requeue or off), the client's stream ends with the
// retryable upstream_error event after the text it had, never [DONE], and
// nothing repeated.
func TestMigrateOnce(t *testing.T) {
	for _, tc := range []struct {
		name       string
		resume     Resume
		killSecond bool
		migrations uint64
		tokens     int
	}{
		{"second cut", ResumeContinue, true, 1, 10},
		{"resume requeue", ResumeRequeue, false, 0, 5},
		{"resume off", ResumeOff, false, 0, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMigrationMesh(t, tc.resume)
			body := `{"model":"` + m.sims[0].Model + `","prompt":"the quick brown fox jumps over","max_tokens":60,"stream":true}`
			res := post(t, context.Background(), m.sims[1].HTTPURL+"/v1/completions", body)
			want, _ := readSSE(t, res)
			res.Body.Close()
			wantText, _, _ := streamText(t, want)

			datas, events := cutRun(t, m, "/v1/completions", body, 5, tc.killSecond)
			if typ := errorEventType(t, datas, events); typ != "upstream_error" {
				t.Fatalf("last event %q (%q), want an upstream_error event", datas[len(datas)-1], events[len(events)-1])
			}
			gotText, _, _ := streamText(t, datas[:len(datas)-1])
			if n := len(strings.Fields(gotText)); !strings.HasPrefix(wantText, gotText) || n < tc.tokens || n >= 60 {
				t.Errorf("client text %q, want a prefix of %q, at least %d tokens long and cut", gotText, wantText, tc.tokens)
			}
			for _, d := range datas {
				if d == "[DONE]" {
					t.Error("[DONE] in a cut stream")
				}
			}
			if got := m.g.Migrations(); got != tc.migrations {
				t.Errorf("migrations %d, want %d", got, tc.migrations)
			}
		})
	}
}

// TestKillReplicaUnderLoadMigrates: streaming completions at 200 requests
// a second through two real-time sims; one is killed (its connections
// reset) after 200 requests. Every request that had not started streaming
// succeeds (retried elsewhere), every stream cut by the kill is migrated
// or ends with the retryable error event, and no client's text repeats or
// loses anything: each is the sim's deterministic answer (the same for
// every request), whole for a finished stream and a prefix of it for one
// that ended with an error.
func TestKillReplicaUnderLoadMigrates(t *testing.T) {
	m := newMigrationMesh(t, ResumeContinue)
	const rate, total, killAt, tokens = 200, 400, 200, 24
	body := `{"model":"` + m.sims[0].Model + `","prompt":"the dying replica","max_tokens":24,"stream":true}`
	ref := post(t, context.Background(), m.sims[1].HTTPURL+"/v1/completions", body)
	want, _ := readSSE(t, ref)
	ref.Body.Close()
	wantText, _, _ := streamText(t, want)
	if len(strings.Fields(wantText)) != tokens {
		t.Fatalf("reference run produced %q", wantText)
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	defer client.CloseIdleConnections()
	type result struct {
		status       int
		datas, evs   []string
		err          error
		inFlightKill bool // streaming when the kill came
	}
	results := make([]result, total)
	var wg sync.WaitGroup
	tick := time.NewTicker(time.Second / rate)
	defer tick.Stop()
	start := time.Now()
	for i := range total {
		<-tick.C
		if i == killAt {
			m.fronts[0].Kill()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, m.gw+"/v1/completions", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			res, err := client.Do(req)
			if err != nil {
				results[i].err = err
				return
			}
			defer res.Body.Close()
			results[i].status = res.StatusCode
			if res.StatusCode == http.StatusOK {
				results[i].datas, results[i].evs = readSSE(t, res)
			}
		}()
	}
	issued := time.Since(start)
	wg.Wait()
	var done, cutErr, notStarted, duplicated int
	for i, r := range results {
		if r.status != http.StatusOK || len(r.datas) == 0 {
			notStarted++
			t.Errorf("request %d: status %d, err %v: failed before streaming", i, r.status, r.err)
			continue
		}
		last := len(r.datas) - 1
		switch {
		case r.datas[last] == "[DONE]":
			done++
			if text, _, _ := streamText(t, r.datas[:last]); text != wantText {
				duplicated++
				t.Errorf("request %d: text\n got %q\nwant %q", i, text, wantText)
			}
		case r.evs[last] == "error":
			cutErr++
			if text, _, _ := streamText(t, r.datas[:last]); !strings.HasPrefix(wantText, text) {
				duplicated++
				t.Errorf("request %d: cut text %q is not a prefix of %q", i, text, wantText)
			}
			if !strings.Contains(r.datas[last], `"code":502`) {
				t.Errorf("request %d: error event %s, want a retryable 502", i, r.datas[last])
			}
		default:
			t.Errorf("request %d: stream ended without [DONE] or an error event: %q", i, r.datas[last])
		}
	}
	st := m.sched.Stats()[0].Endpoints
	t.Logf("%d streaming requests sent in %v (%.0f/s), one of two sims killed after %d: %d done (%d of them migrated mid-stream), "+
		"%d ended with the retryable error, %d failed before streaming, %d repeated or lost text; %d retried before any byte; ejections of the dead endpoint %d",
		total, issued.Round(time.Millisecond), float64(total)/issued.Seconds(), killAt, done, m.g.Migrations(), cutErr, notStarted, duplicated, m.g.Retries(), st[0].Ejections)
	if m.g.Migrations() == 0 {
		t.Error("no stream was migrated: the kill cut none")
	}
	if st[0].Ejections == 0 {
		t.Error("the dead endpoint was never ejected")
	}
}
