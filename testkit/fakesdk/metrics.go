package fakesdk

import (
	"sync"
	"sync/atomic"

	"github.com/envoyproxy/envoy/contrib/golang/common/go/api"
)

// ConfigCallbacks is a fake of api.ConfigCallbackHandler, the handle a
// filter's config parser gets to define Envoy stats. As in Envoy, defining
// the same name twice returns the same metric.
type ConfigCallbacks struct {
	mu       sync.Mutex
	counters map[string]*Metric
	gauges   map[string]*Metric
}

var _ api.ConfigCallbackHandler = (*ConfigCallbacks)(nil)

// NewConfigCallbacks returns an empty metric registry.
func NewConfigCallbacks() *ConfigCallbacks {
	return &ConfigCallbacks{counters: map[string]*Metric{}, gauges: map[string]*Metric{}}
}

// DefineCounterMetric returns the counter called name, creating it once.
func (c *ConfigCallbacks) DefineCounterMetric(name string) api.CounterMetric {
	return c.define(c.counters, name)
}

// DefineGaugeMetric returns the gauge called name, creating it once.
func (c *ConfigCallbacks) DefineGaugeMetric(name string) api.GaugeMetric {
	return c.define(c.gauges, name)
}

func (c *ConfigCallbacks) define(m map[string]*Metric, name string) *Metric {
	c.mu.Lock()
	defer c.mu.Unlock()
	if x, ok := m[name]; ok {
		return x
	}
	x := &Metric{}
	m[name] = x
	return x
}

// Counter returns the value of the counter called name and whether it was
// defined.
func (c *ConfigCallbacks) Counter(name string) (uint64, bool) {
	c.mu.Lock()
	x, ok := c.counters[name]
	c.mu.Unlock()
	if !ok {
		return 0, false
	}
	return x.Get(), true
}

// Gauge returns the value of the gauge called name and whether it was
// defined.
func (c *ConfigCallbacks) Gauge(name string) (uint64, bool) {
	c.mu.Lock()
	x, ok := c.gauges[name]
	c.mu.Unlock()
	if !ok {
		return 0, false
	}
	return x.Get(), true
}

// Names lists the defined counters and gauges.
func (c *ConfigCallbacks) Names() (counters, gauges []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for n := range c.counters {
		counters = append(counters, n)
	}
	for n := range c.gauges {
		gauges = append(gauges, n)
	}
	return counters, gauges
}

// Metric is a fake Envoy counter or gauge. Like Envoy's gauges it is
// unsigned: a decrement below zero wraps, which tests catch as a huge value.
type Metric struct{ v atomic.Uint64 }

var (
	_ api.CounterMetric = (*Metric)(nil)
	_ api.GaugeMetric   = (*Metric)(nil)
)

// Increment adds offset (which may be negative).
func (m *Metric) Increment(offset int64) { m.v.Add(uint64(offset)) }

// Get returns the current value.
func (m *Metric) Get() uint64 { return m.v.Load() }

// Record sets the value.
func (m *Metric) Record(value uint64) { m.v.Store(value) }
