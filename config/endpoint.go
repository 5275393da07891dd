package config

import (
	"fmt"
	"net/url"
	"reflect"
	"sort"
	"strings"

	"github.com/llmesh/llmesh/kvevents"
	"gopkg.in/yaml.v3"
)

// EndpointSpec is one engine replica of a pool. In YAML it is either the
// address alone ("10.0.0.1:8000", today's form) or a mapping with
// per-endpoint settings:
//
//	endpoints:
//	  - 10.0.0.1:8000
//	  - address: 10.0.0.2:8000
//	    max_inflight: 16
//	    metrics_url: http://10.0.0.2:9090/metrics
type EndpointSpec struct {
	// Address is host:port; required.
	Address string `yaml:"address"`
	// MaxInflight is this endpoint's own limit; 0 means the pool's
	// capacity.max_inflight divided evenly among its endpoints (rounded up).
	MaxInflight int `yaml:"max_inflight,omitempty"`
	// MetricsURL is this endpoint's Prometheus endpoint, from which its
	// limit and load are learned; empty means capacity.metrics.url_template
	// expanded for this endpoint, or none.
	MetricsURL string `yaml:"metrics_url,omitempty"`
}

// endpointSpecType lets the strict checker accept the address-only form.
var endpointSpecType = reflect.TypeOf(EndpointSpec{})

// UnmarshalYAML accepts the address alone or the mapping.
func (e *EndpointSpec) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		*e = EndpointSpec{Address: n.Value}
		return nil
	}
	type plain EndpointSpec
	return n.Decode((*plain)(e))
}

// MarshalYAML writes the address alone when nothing else is set, so a
// config in today's form serializes as it was written.
func (e EndpointSpec) MarshalYAML() (any, error) {
	if e.MaxInflight == 0 && e.MetricsURL == "" {
		return e.Address, nil
	}
	type plain EndpointSpec
	return plain(e), nil
}

// endpointPlaceholder is replaced by an endpoint's host:port in
// capacity.metrics.url_template.
const endpointPlaceholder = "{endpoint}"

// endpoints compiles a pool's endpoints; p is the pool's path.
func (b *builder) endpoints(p string, src PoolSpec, pool *Pool) {
	ep := join(p, "endpoints")
	if len(src.Endpoints) == 0 {
		b.c.add(ep, 0, "at least one endpoint is required")
	}
	tmpl := src.Capacity.Metrics.URLTemplate
	if tmpl != "" {
		tp := join(p, "capacity.metrics.url_template")
		if !strings.Contains(tmpl, endpointPlaceholder) {
			b.c.add(tp, 0, "%q must contain %s", tmpl, endpointPlaceholder)
		} else if !httpURL(strings.ReplaceAll(tmpl, endpointPlaceholder, "h:1")) {
			b.c.add(tp, 0, "%q must be an http(s) URL with %s as (part of) its host", tmpl, endpointPlaceholder)
		}
		if src.Capacity.Metrics.URL != "" {
			b.c.add(tp, 0, "set url (one engine for the pool) or url_template (one per endpoint), not both")
		}
	}
	seen := map[string]int{}
	for j, e := range src.Endpoints {
		path := index(ep, j)
		addrPath := path
		if e.MaxInflight != 0 || e.MetricsURL != "" {
			addrPath = join(path, "address")
		}
		if e.Address == "" {
			b.c.add(addrPath, 0, "is required")
			continue
		}
		host, port := b.hostPort(addrPath, e.Address, false)
		if k, dup := seen[e.Address]; dup {
			b.c.add(addrPath, 0, "duplicate endpoint %q (also endpoints[%d])", e.Address, k)
		}
		seen[e.Address] = j
		b.intRange(join(path, "max_inflight"), e.MaxInflight, 0, maxInflight)
		metrics := e.MetricsURL
		if metrics != "" && !httpURL(metrics) {
			b.c.add(join(path, "metrics_url"), 0, "%q must be an http(s) URL", metrics)
		}
		if metrics == "" && tmpl != "" {
			metrics = strings.ReplaceAll(tmpl, endpointPlaceholder, e.Address)
		}
		pool.Endpoints = append(pool.Endpoints, Endpoint{Host: host, Port: port, MaxInflight: e.MaxInflight, MetricsURL: metrics})
	}
}

func httpURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// Address is the endpoint's host:port.
func (e Endpoint) Address() string { return fmt.Sprintf("%s:%d", hostForAddr(e.Host), e.Port) }

func hostForAddr(h string) string {
	if strings.Contains(h, ":") {
		return "[" + h + "]"
	}
	return h
}

// kvEvents compiles prefix_routing.kv_events (path p) of a pool whose
// endpoints are compiled: every endpoint needs a publisher, and every
// publisher an endpoint.
func (b *builder) kvEvents(p string, src *KVEventsSpec, ps PoolSpec, pool *Pool) *KVEventSource {
	out := &KVEventSource{Topic: src.Topic, Publishers: map[string]string{}}
	eps := join(p, "endpoints")
	byAddr := map[string]string{} // as written → Address()
	var known []string
	for j, e := range ps.Endpoints {
		if j < len(pool.Endpoints) && e.Address != "" {
			byAddr[e.Address] = pool.Endpoints[j].Address()
			known = append(known, e.Address)
		}
	}
	keys := make([]string, 0, len(src.Endpoints))
	for k := range src.Endpoints {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := src.Endpoints[k]
		addr, ok := byAddr[k]
		if !ok {
			b.c.add(join(eps, k), 0, "%q is not one of the pool's endpoints (%s)", k, strings.Join(known, ", "))
			continue
		}
		if !kvevents.Connectable(v) {
			b.c.add(join(eps, k), 0, "%q must be tcp://HOST:PORT", v)
			continue
		}
		out.Publishers[addr] = v
	}
	for _, e := range known {
		if _, ok := src.Endpoints[e]; !ok {
			b.c.add(eps, 0, "endpoint %q has no publisher: every endpoint of a pool with kv_events needs one", e)
		}
	}
	return out
}
