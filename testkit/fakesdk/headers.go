package fakesdk

import (
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/envoyproxy/envoy/contrib/golang/common/go/api"
)

// phase marks the span during which a header map or buffer may be used.
// The Stream closes it when the phase continues or the stream ends.
type phase struct {
	s      *Stream
	name   string
	closed atomic.Bool
}

func (p *phase) check(what string) {
	if p == nil || !p.closed.Load() {
		return
	}
	msg := what + " used after its phase " + p.name + " ended"
	p.s.violate(msg)
	// The SDK panics when the C side rejects a call made in the wrong phase.
	panic("fakesdk: " + msg)
}

// HeaderMap is a fake of the SDK's header and trailer maps. Keys are stored
// lower-case, as HTTP/2 and Envoy do. It implements api.RequestHeaderMap,
// api.ResponseHeaderMap and both trailer maps.
type HeaderMap struct {
	mu    sync.Mutex
	h     map[string][]string
	phase *phase
}

var (
	_ api.RequestHeaderMap   = (*HeaderMap)(nil)
	_ api.ResponseHeaderMap  = (*HeaderMap)(nil)
	_ api.RequestTrailerMap  = (*HeaderMap)(nil)
	_ api.ResponseTrailerMap = (*HeaderMap)(nil)
)

// NewHeaders builds a header map from alternating key, value arguments.
func NewHeaders(kv ...string) *HeaderMap {
	if len(kv)%2 != 0 {
		panic("fakesdk.NewHeaders: odd number of arguments")
	}
	m := &HeaderMap{h: map[string][]string{}}
	for i := 0; i < len(kv); i += 2 {
		k := strings.ToLower(kv[i])
		m.h[k] = append(m.h[k], kv[i+1])
	}
	return m
}

// RequestHeaders builds request headers with the pseudo-headers set.
func RequestHeaders(method, path string, kv ...string) *HeaderMap {
	m := NewHeaders(kv...)
	m.h[":method"] = []string{method}
	m.h[":path"] = []string{path}
	if _, ok := m.h[":scheme"]; !ok {
		m.h[":scheme"] = []string{"http"}
	}
	if _, ok := m.h[":authority"]; !ok {
		m.h[":authority"] = []string{"llm.test"}
	}
	return m
}

// ResponseHeaders builds response headers with :status set.
func ResponseHeaders(status int, kv ...string) *HeaderMap {
	m := NewHeaders(kv...)
	m.h[":status"] = []string{strconv.Itoa(status)}
	return m
}

// Snapshot returns a copy of the contents, usable at any time (it does not
// count as a use by the filter).
func (m *HeaderMap) Snapshot() map[string][]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string][]string, len(m.h))
	for k, v := range m.h {
		out[k] = append([]string(nil), v...)
	}
	return out
}

// Peek returns the first value of key without a phase check, for tests.
func (m *HeaderMap) Peek(key string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if v := m.h[strings.ToLower(key)]; len(v) > 0 {
		return v[0]
	}
	return ""
}

func (m *HeaderMap) use() { m.phase.check("header map") }

// GetRaw returns the first value of key (case-sensitive in Envoy; keys are
// lower-case here anyway).
func (m *HeaderMap) GetRaw(key string) string {
	v, _ := m.Get(key)
	return v
}

// Get returns the first value of key.
func (m *HeaderMap) Get(key string) (string, bool) {
	m.use()
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.h[strings.ToLower(key)]
	if !ok || len(v) == 0 {
		return "", false
	}
	return v[0], true
}

// Values returns all values of key.
func (m *HeaderMap) Values(key string) []string {
	m.use()
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.h[strings.ToLower(key)]
}

// Set replaces the values of key.
func (m *HeaderMap) Set(key, value string) {
	m.use()
	m.mu.Lock()
	m.h[strings.ToLower(key)] = []string{value}
	m.mu.Unlock()
}

// Add appends a value to key.
func (m *HeaderMap) Add(key, value string) {
	m.use()
	m.mu.Lock()
	k := strings.ToLower(key)
	m.h[k] = append(m.h[k], value)
	m.mu.Unlock()
}

// Del removes key.
func (m *HeaderMap) Del(key string) {
	m.use()
	m.mu.Lock()
	delete(m.h, strings.ToLower(key))
	m.mu.Unlock()
}

// Range calls f for each key and value in key order until f returns false.
func (m *HeaderMap) Range(f func(key, value string) bool) {
	m.use()
	snap := m.Snapshot()
	keys := make([]string, 0, len(snap))
	for k := range snap {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		for _, v := range snap[k] {
			if !f(k, v) {
				return
			}
		}
	}
}

// RangeWithCopy is Range.
func (m *HeaderMap) RangeWithCopy(f func(key, value string) bool) { m.Range(f) }

// GetAllHeaders returns a copy of all headers.
func (m *HeaderMap) GetAllHeaders() map[string][]string {
	m.use()
	return m.Snapshot()
}

// Scheme returns :scheme.
func (m *HeaderMap) Scheme() string { return m.GetRaw(":scheme") }

// Method returns :method.
func (m *HeaderMap) Method() string { return m.GetRaw(":method") }

// Host returns :authority.
func (m *HeaderMap) Host() string { return m.GetRaw(":authority") }

// Path returns :path.
func (m *HeaderMap) Path() string { return m.GetRaw(":path") }

// SetMethod sets :method.
func (m *HeaderMap) SetMethod(method string) { m.Set(":method", method) }

// SetHost sets :authority.
func (m *HeaderMap) SetHost(host string) { m.Set(":authority", host) }

// SetPath sets :path.
func (m *HeaderMap) SetPath(path string) { m.Set(":path", path) }

// Status returns :status.
func (m *HeaderMap) Status() (int, bool) {
	v, ok := m.Get(":status")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(v)
	return n, err == nil
}
