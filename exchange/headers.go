package exchange

import "strings"

// Headers is the one thing the core needs from a host's header or trailer
// map: a lookup by lower-case name returning "" when absent. net/http.Header
// satisfies it (its Get canonicalises the name); the Envoy adapter wraps its
// header map.
type Headers interface {
	Get(name string) string
}

// HeaderFunc adapts a lookup function to Headers.
type HeaderFunc func(name string) string

// Get calls f.
func (f HeaderFunc) Get(name string) string { return f(name) }

// MapHeaders is a Headers over a plain map with lower-case keys, for hosts
// and tests that hold headers as a map.
type MapHeaders map[string]string

// Get returns the value stored under the lower-cased name.
func (m MapHeaders) Get(name string) string {
	if v, ok := m[name]; ok {
		return v
	}
	return m[strings.ToLower(name)]
}

var noHeaders = HeaderFunc(func(string) string { return "" })
