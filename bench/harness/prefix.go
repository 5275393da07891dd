package harness

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/llmesh/llmesh/scheduler/capacity"
)

// scrapePrefix sums the prefix-cache counters of the engines at urls (their
// /metrics), each read within scrapeTimeout; an engine without the
// counters is an error naming it.
func scrapePrefix(ctx context.Context, urls []string) (capacity.Sample, error) {
	var sum capacity.Sample
	for _, u := range urls {
		s, err := scrapeOne(ctx, u)
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

const scrapeTimeout = 5 * time.Second

func scrapeOne(ctx context.Context, url string) (capacity.Sample, error) {
	ctx, cancel := context.WithTimeout(ctx, scrapeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return capacity.Sample{}, fmt.Errorf("%s: %w", url, err)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return capacity.Sample{}, fmt.Errorf("%s: %w", url, err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return capacity.Sample{}, fmt.Errorf("%s: status %d", url, res.StatusCode)
	}
	b, err := io.ReadAll(io.LimitReader(res.Body, 16<<20))
	if err != nil {
		return capacity.Sample{}, fmt.Errorf("%s: %w", url, err)
	}
	s, err := capacity.Parse(b)
	if err != nil {
		return capacity.Sample{}, fmt.Errorf("%s: %w", url, err)
	}
	return s, nil
}
