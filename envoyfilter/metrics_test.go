package envoyfilter

import (
	"sync/atomic"
	"testing"

	"github.com/envoyproxy/envoy/contrib/golang/common/go/api"
)

// envoyStats plays Envoy's stat store for stat sets of several configs:
// one value per name, and a config Envoy freed answers every update with
// the SDK's panic (CAPIFilterIsGone).
type envoyStats struct {
	vals map[string]*atomic.Int64
}

type configHandle struct {
	s    *envoyStats
	gone atomic.Bool
}

type handleMetric struct {
	h *configHandle
	v *atomic.Int64
}

func (m handleMetric) Increment(n int64) {
	if m.h.gone.Load() {
		panic("request has been finished")
	}
	m.v.Add(n)
}
func (m handleMetric) Get() uint64     { return uint64(m.v.Load()) }
func (m handleMetric) Record(v uint64) { m.v.Store(int64(v)) }

func (h *configHandle) metric(name string) handleMetric {
	v, ok := h.s.vals[name]
	if !ok {
		v = &atomic.Int64{}
		h.s.vals[name] = v
	}
	return handleMetric{h: h, v: v}
}

func (h *configHandle) DefineCounterMetric(name string) api.CounterMetric { return h.metric(name) }
func (h *configHandle) DefineGaugeMetric(name string) api.GaugeMetric     { return h.metric(name) }

// TestStatsAfterConfigDrop: an update through a config Envoy dropped
// lands on the same stat of the newest live config, whether Destroy ran
// already or the SDK found the config gone first; with no live config it
// is counted as lost, never a panic.
func TestStatsAfterConfigDrop(t *testing.T) {
	store := &envoyStats{vals: map[string]*atomic.Int64{}}
	var reg statRegistry
	ha, hb := &configHandle{s: store}, &configHandle{s: store}
	a := defineMetrics(&reg, ha)
	b := defineMetrics(&reg, hb)

	a.queued.Increment(1)
	ha.gone.Store(true) // Envoy freed config A; its Destroy has not run yet
	a.queued.Increment(-1)
	a.cancelledQueued.Increment(1)
	want(t, "queued", store.vals[GaugeQueued].Load(), int64(0))
	want(t, "cancelled", store.vals[StatCancelledQueued].Load(), int64(1))
	want(t, "A dropped", a.queued.set.dropped.Load(), true)

	b.requests.set.drop() // Destroy of the last config
	hb.gone.Store(true)
	lost := LostStatUpdates()
	a.requests.Increment(1)
	b.requests.Increment(1)
	want(t, "lost updates", LostStatUpdates()-lost, uint64(2))
}
