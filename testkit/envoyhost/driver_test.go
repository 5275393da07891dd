package envoyhost

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// One driven host for this test binary (the Go runtime in the .so cannot
// be unloaded, so one process serves every stream); TestMain closes it.
var (
	drivenOnce sync.Once
	driven     *Driver
	drivenErr  error
	drivenN    atomic.Int64
)

const drivenConfig = `{"mesh": {
  "pools": [{"name": "sim", "protocol": "openai", "endpoints": ["127.0.0.1:8000", "127.0.0.1:8001"],
             "capacity": {"max_inflight": 4}, "scheduler": {"policy": "fifo"}}],
  "classes": [{"name": "batch", "priority": 10}],
  "default_class": "batch",
  "classification": {"priority_header": {"name": "x-llmesh-class", "trusted_sources": ["127.0.0.1/32"]}}}}`

func drivenHost(t testing.TB) *Driver {
	t.Helper()
	so, host := build(t)
	drivenOnce.Do(func() {
		driven, drivenErr = Start(host, so, Options{})
		if drivenErr == nil {
			drivenErr = driven.Config(drivenConfig)
		}
		if drivenErr == nil {
			drivenErr = driven.Sync()
		}
	})
	if drivenErr != nil {
		t.Fatal(drivenErr)
	}
	return driven
}

// closeDriven ends the driven host and returns what its report says is
// wrong.
func closeDriven() []string {
	if driven == nil {
		return nil
	}
	out, err := driven.Close()
	var r report
	if jerr := json.Unmarshal(out, &r); jerr != nil {
		return []string{fmt.Sprintf("driven host report: %v (exit %v)\n%s", jerr, err, out)}
	}
	p := baseline(&r, nil)
	if err != nil && len(p) == 0 {
		p = append(p, "driven host exit: "+err.Error())
	}
	return p
}

// next returns the stream's next event, failing after a while.
func next(t testing.TB, ch <-chan Event) Event {
	t.Helper()
	select {
	case e := <-ch:
		return e
	case <-time.After(10 * time.Second):
		t.Fatal("no event from the driven host within 10s")
		return Event{}
	}
}

// untilEnded skips the stream's events up to its end.
func untilEnded(t testing.TB, ch <-chan Event) {
	t.Helper()
	for next(t, ch).Kind != "ended" {
	}
}

// TestDriven sends one SSE completion step by step and checks the events
// as the host reports them, in order: what went upstream (mutated headers
// with the override host, the body), what reached the client, the end.
func TestDriven(t *testing.T) {
	d := drivenHost(t)
	ch, err := d.Open("t1")
	if err != nil {
		t.Fatal(err)
	}
	body := `{"model":"m","prompt":"hi","stream":true,"max_tokens":2}`
	if err := d.Send(`t1 headers :method POST :path /v1/completions content-type application/json x-note `+Quote("a \"quoted\" \\ value\t\xff"),
		"t1 data end hex:"+hex.EncodeToString([]byte(body))); err != nil {
		t.Fatal(err)
	}
	e := next(t, ch)
	if e.Side != "upstream" || e.Kind != "headers" || e.Header("x-note") != "a \"quoted\" \\ value\t\xff" || !strings.HasPrefix(e.OverrideHost, "127.0.0.1:800") {
		t.Fatalf("first event %+v, want the request headers upstream with x-note intact and one of the pool's endpoints as override host", e)
	}
	if e = next(t, ch); e.Side != "upstream" || e.Kind != "data" || !e.End || e.Data != body {
		t.Fatalf("second event %+v, want the whole body upstream", e)
	}
	sse := "data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: {\"choices\":[{\"text\":\"b\"}]}\n\ndata: [DONE]\n\n"
	if err := d.Send("up t1 headers :status 200 content-type text/event-stream", "up t1 data "+Quote(sse), "up t1 data end"); err != nil {
		t.Fatal(err)
	}
	var kinds []string
	var down string
	for e = next(t, ch); e.Kind != "ended"; e = next(t, ch) {
		kinds = append(kinds, e.Side+" "+e.Kind)
		down += e.Data
	}
	if got := strings.Join(kinds, ", "); got != "downstream headers, downstream data, downstream data" || down != sse {
		t.Errorf("events %s with body %q, want headers then both pieces of %q", got, down, sse)
	}
	if e.Details != "response complete" {
		t.Errorf("ended %q, want response complete", e.Details)
	}
	if err := d.Drop("t1"); err != nil {
		t.Fatal(err)
	}
	// A dropped stream is gone; dropping an open one is refused.
	ch2, err := d.Open("t2")
	if err != nil {
		t.Fatal(err)
	}
	// (A stream exists in Envoy from its request headers on.)
	if err := d.Send("t2 headers :method POST :path /raw", "drop t2", "t1 reset"); err != nil {
		t.Fatal(err)
	}
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
	var notes []string
	for _, n := range d.TakeNotes() {
		notes = append(notes, n.Kind+": "+n.Details)
	}
	if len(notes) != 2 || !strings.HasSuffix(notes[0], "drop t2: the stream has not ended") || !strings.HasSuffix(notes[1], "unknown stream t1") {
		t.Errorf("notes %q, want the refused drop of t2, then t1 unknown", notes)
	}
	if err := d.Send("t2 reset"); err != nil {
		t.Fatal(err)
	}
	untilEnded(t, ch2)
	if err := d.Drop("t2"); err != nil {
		t.Fatal(err)
	}
}

// FuzzDrivenBytes: header values and body bytes reach the upstream side
// exactly as sent, whatever they hold (Quote and hex: through the host's
// tokenizer, the SDK's header and buffer copies, the JSON events back).
func FuzzDrivenBytes(f *testing.F) {
	f.Add("plain", []byte("body"))
	f.Add(" lead and trail ", []byte{0, 1, 2, 0xff})
	f.Add("\"\\#x\x00\x7f\xc3\xa9", []byte("line\nbreak\r\n"))
	f.Add("", []byte{})
	f.Fuzz(func(t *testing.T, value string, body []byte) {
		if len(value)+len(body) > 4096 {
			// Content, not size, is what this checks; large steps only
			// run slower.
			t.Skip()
		}
		if value == "" {
			// Envoy drops empty header values from a local reply only;
			// an empty token is still a value, keep the case simple.
			value = "-"
		}
		d := drivenHost(t)
		name := fmt.Sprintf("f%d", drivenN.Add(1))
		ch, err := d.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		head := name + " headers :method POST :path /raw x-v " + Quote(value)
		steps := []string{head}
		if len(body) == 0 {
			steps[0] = name + " headers end :method POST :path /raw x-v " + Quote(value)
		} else {
			steps = append(steps, name+" data end hex:"+hex.EncodeToString(body))
		}
		if err := d.Send(steps...); err != nil {
			t.Fatal(err)
		}
		var got []byte
		e := next(t, ch)
		if e.Kind != "headers" || e.Header("x-v") != value {
			t.Fatalf("upstream headers %+v, want x-v %q", e, value)
		}
		for !e.End {
			if e = next(t, ch); e.Side != "upstream" {
				t.Fatalf("event %+v before the request's end went upstream", e)
			}
			got = append(got, e.Data...)
		}
		if string(got) != string(body) {
			t.Errorf("upstream body %q, want %q", got, body)
		}
		if err := d.Send("up " + name + " headers end :status 204"); err != nil {
			t.Fatal(err)
		}
		untilEnded(t, ch)
		if err := d.Drop(name); err != nil {
			t.Fatal(err)
		}
		for _, n := range d.TakeNotes() {
			t.Errorf("%s: %s", n.Kind, n.Details)
		}
	})
}
