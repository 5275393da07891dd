package capacity

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"

	"github.com/llmesh/llmesh/clock"
	"github.com/llmesh/llmesh/config"
)

// FromMesh returns one watcher per pool of c that learns capacity from its
// engine (capacity.metrics.url set), and one per endpoint with a metrics
// URL of its own (metrics_url, or the pool's url_template), adjusting
// target (an EndpointTarget when a pool has endpoint metrics). The caller runs each
// watcher's Run in a goroutine it owns. client nil means a default client
// per watcher.
func FromMesh(c *config.Config, target Target, clk clock.Clock, client *http.Client) ([]*Watcher, error) {
	var ws []*Watcher
	var errs []error
	for i, p := range c.Pools {
		ws = append(ws, endpointWatchers(i, p, target, clk, client, &errs)...)
		if p.Metrics == nil || p.Metrics.URL == "" {
			continue
		}
		w, err := New(Config{
			Pool:       p.Name,
			URL:        p.Metrics.URL,
			Interval:   p.Metrics.Interval,
			StaleAfter: p.Metrics.StaleAfter,
			Rule:       Rule{Max: p.MaxInflight},
			Client:     client,
		}, target, clk)
		if err != nil {
			errs = append(errs, fmt.Errorf("pools[%d].capacity.metrics: %w", i, err))
			continue
		}
		ws = append(ws, w)
	}
	return ws, errors.Join(errs...)
}

// endpointWatchers builds the watchers of pool p's endpoints that have a
// metrics URL; i is the pool's index, for errors.
func endpointWatchers(i int, p *config.Pool, target Target, clk clock.Clock, client *http.Client, errs *[]error) []*Watcher {
	var ws []*Watcher
	share := (p.MaxInflight + len(p.Endpoints) - 1) / max(1, len(p.Endpoints))
	for j, e := range p.Endpoints {
		if e.MetricsURL == "" {
			continue
		}
		cfg := Config{Pool: p.Name, Endpoint: e.Address(), URL: e.MetricsURL, Rule: Rule{Max: cmp.Or(e.MaxInflight, share)}, Client: client}
		if p.Metrics != nil {
			cfg.Interval, cfg.StaleAfter = p.Metrics.Interval, p.Metrics.StaleAfter
		}
		w, err := New(cfg, target, clk)
		if err != nil {
			*errs = append(*errs, fmt.Errorf("pools[%d].endpoints[%d].metrics_url: %w", i, j, err))
			continue
		}
		ws = append(ws, w)
	}
	return ws
}
