package kvevents

import (
	"strings"
	"testing"
)

func TestParseConfig(t *testing.T) {
	c, err := ParseConfig(`{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:5557","topic":"kv-events"}`)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Publishes() || !c.binds() || c.Topic != "kv-events" || c.MaxQueueSize != DefaultMaxQueueSize {
		t.Errorf("config %+v", c)
	}
	// vLLM's defaults: enabled alone means the zmq publisher on tcp://*:5557.
	c, err = ParseConfig(`{"enable_kv_cache_events":true}`)
	if err != nil || c.Publisher != "zmq" || c.Endpoint != DefaultEndpoint {
		t.Errorf("defaults: %+v, %v", c, err)
	}
	if c, _ := ParseConfig(`{}`); c.Publishes() || c.Publisher != "null" {
		t.Errorf("empty config publishes: %+v", c)
	}
	if c, _ := ParseConfig(`{"enable_kv_cache_events":true,"endpoint":"tcp://collector:5557"}`); c.binds() {
		t.Error("a named host binds; vLLM connects to it")
	}
	for _, bad := range []struct{ in, want string }{
		{`{"enable_kv_cache_events":true,"publisher":"kafka"}`, `publisher: "kafka" must be`},
		{`{"endpoint":"ipc:///tmp/x"}`, `endpoint: "ipc:///tmp/x" must be tcp://HOST:PORT`},
		{`{"replay_endpoint":"tcp://*:5558"}`, `replay_endpoint: "tcp://*:5558": replay is not served`},
		{`{"hwm":0}`, `hwm: 0 must be at least 1`},
		{`{"enable_kv_cache_event":true}`, `unknown field "enable_kv_cache_event"`},
		{`{} {}`, `more than one JSON value`},
		{`[`, `unexpected EOF`},
	} {
		if _, err := ParseConfig(bad.in); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: error %v, want one mentioning %q", bad.in, err, bad.want)
		}
	}
}

func FuzzParseConfig(f *testing.F) {
	f.Add(`{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:5557","topic":"kv-events"}`)
	f.Add(`{"replay_endpoint":null,"buffer_steps":3}`)
	f.Add(`{"endpoint":"tcp://[::1]:1"}`)
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseConfig(s)
		if err != nil {
			return
		}
		if c.Publisher != "zmq" && c.Publisher != "null" || !strings.HasPrefix(c.Endpoint, "tcp://") || c.MaxQueueSize < 1 {
			t.Fatalf("accepted %q as %+v", s, c)
		}
	})
}
