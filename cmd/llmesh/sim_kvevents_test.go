package main

import "testing"

// TestSimKVEventsConfigFlag: a bad --kv-events-config is a usage error
// naming the flag and the field, before anything listens.
func TestSimKVEventsConfigFlag(t *testing.T) {
	wantUsage(t, mainErr("sim", "--listen", "127.0.0.1:0", "--kv-events-config", `{"enable_kv_cache_events":true,"publisher":"kafka"}`),
		"--kv-events-config", `publisher: "kafka"`)
	wantUsage(t, mainErr("sim", "--listen", "127.0.0.1:0", "--kv-events-config", `{"enable_kv_cache_events":true,"endpoint":"ipc:///tmp/x"}`),
		"--kv-events-config", "endpoint")
}
