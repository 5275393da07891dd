package kvevents

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// Config is vLLM's --kv-events-config (vllm/config/kv_events.py), the JSON
// object `llmesh sim --kv-events-config` reads, with vLLM's defaults.
type Config struct {
	// EnableKVCacheEvents turns publishing on.
	EnableKVCacheEvents bool `json:"enable_kv_cache_events"`
	// Publisher is "zmq" or "null"; empty means "zmq" when enabled.
	Publisher string `json:"publisher"`
	// Endpoint is where the PUB socket binds (a "*" or "::" host, as
	// tcp://*:5557) or connects (any other host). Default tcp://*:5557.
	Endpoint string `json:"endpoint"`
	// ReplayEndpoint is vLLM's ROUTER socket for replaying missed batches;
	// llmesh's publisher does not serve it (a gap clears the subscriber's
	// view instead), so a non-empty value is an error rather than a
	// silent no-op.
	ReplayEndpoint *string `json:"replay_endpoint"`
	// BufferSteps is the replay buffer's length (kept for the replay
	// socket; unused).
	BufferSteps int `json:"buffer_steps"`
	// HWM is the PUB socket's high-water mark (accepted; the pure-Go
	// socket has no per-socket limit to set).
	HWM int `json:"hwm"`
	// MaxQueueSize bounds the batches waiting to be sent; beyond it a
	// batch is dropped and its sequence number skipped, so subscribers
	// see the gap.
	MaxQueueSize int `json:"max_queue_size"`
	// Topic is the first frame of every message.
	Topic string `json:"topic"`
}

// Defaults are vLLM's.
const (
	DefaultEndpoint     = "tcp://*:5557"
	DefaultBufferSteps  = 10_000
	DefaultHWM          = 100_000
	DefaultMaxQueueSize = 100_000
)

// ParseConfig reads a --kv-events-config JSON object, fills vLLM's
// defaults and validates it; errors name the field.
func ParseConfig(s string) (Config, error) {
	c := Config{BufferSteps: DefaultBufferSteps, HWM: DefaultHWM, MaxQueueSize: DefaultMaxQueueSize}
	dec := json.NewDecoder(bytes.NewReader([]byte(s)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return Config{}, err
	}
	if dec.More() {
		return Config{}, errors.New("more than one JSON value")
	}
	if c.Publisher == "" {
		c.Publisher = "null"
		if c.EnableKVCacheEvents {
			c.Publisher = "zmq"
		}
	}
	if c.Endpoint == "" {
		c.Endpoint = DefaultEndpoint
	}
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf(format, args...))
	}
	if c.Publisher != "zmq" && c.Publisher != "null" {
		bad("publisher: %q must be \"zmq\" or \"null\"", c.Publisher)
	}
	if !strings.HasPrefix(c.Endpoint, "tcp://") || !strings.Contains(c.Endpoint[len("tcp://"):], ":") {
		bad("endpoint: %q must be tcp://HOST:PORT", c.Endpoint)
	}
	if c.ReplayEndpoint != nil && *c.ReplayEndpoint != "" {
		bad("replay_endpoint: %q: replay is not served; a subscriber that misses a batch clears its view of the engine instead", *c.ReplayEndpoint)
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"buffer_steps", c.BufferSteps}, {"hwm", c.HWM}, {"max_queue_size", c.MaxQueueSize}} {
		if f.v < 1 {
			bad("%s: %d must be at least 1", f.name, f.v)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return Config{}, err
	}
	return c, nil
}

// Publishes reports whether c asks for a ZMQ publisher.
func (c Config) Publishes() bool { return c.EnableKVCacheEvents && c.Publisher == "zmq" }

// bindHost reports whether the endpoint's host means "bind here", as
// vLLM decides: a wildcard host binds, any other connects.
func (c Config) binds() bool {
	return strings.Contains(c.Endpoint, "*") || strings.Contains(c.Endpoint, "::")
}

// Connectable reports whether s is tcp://HOST:PORT with a host and port
// to connect to (not a wildcard bind address, not port 0): what a
// subscriber dials.
func Connectable(s string) bool {
	rest, ok := strings.CutPrefix(s, "tcp://")
	if !ok {
		return false
	}
	host, port, err := net.SplitHostPort(rest)
	if err != nil || host == "" || host == "*" {
		return false
	}
	n, err := strconv.Atoi(port)
	return err == nil && n > 0 && n < 65536
}
