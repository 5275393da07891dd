package harness

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/llmesh/llmesh/scheduler/capacity"
)

// scrapeTimeout bounds one read of an engine's /metrics.
const scrapeTimeout = 5 * time.Second

// scrapePrefix sums the prefix-cache counters of the engines at urls (their
// /metrics, capacity.Scrape); an engine without the counters is an error
// naming it.
func scrapePrefix(ctx context.Context, urls []string) (capacity.Sample, error) {
	var sum capacity.Sample
	for _, u := range urls {
		sctx, cancel := context.WithTimeout(ctx, scrapeTimeout)
		s, err := capacity.Scrape(sctx, http.DefaultClient, u)
		cancel()
		if err != nil {
			return capacity.Sample{}, err
		}
		if !s.HasPrefix {
			return capacity.Sample{}, fmt.Errorf("%s: no %s or %s (is prefix caching on?)", u, capacity.MetricPrefixQueries, capacity.MetricPrefixHits)
		}
		sum.PrefixQueries += s.PrefixQueries
		sum.PrefixHits += s.PrefixHits
	}
	return sum, nil
}
