package capacity

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/llmesh/llmesh/clock"
	"github.com/llmesh/llmesh/config"
)

// FromMesh returns one watcher per pool of c that learns capacity from its
// engine (capacity.metrics.url set), adjusting target. The caller runs each
// watcher's Run in a goroutine it owns. client nil means a default client
// per watcher.
func FromMesh(c *config.Config, target Target, clk clock.Clock, client *http.Client) ([]*Watcher, error) {
	var ws []*Watcher
	var errs []error
	for i, p := range c.Pools {
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
