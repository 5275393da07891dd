package capacity

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/llmesh/llmesh/clock"
	"github.com/llmesh/llmesh/scheduler"
)

// Target is what the watcher adjusts; *scheduler.Scheduler implements it.
type Target interface {
	SetLimit(pool string, n int) error
}

// EndpointTarget is what a watcher of one endpoint adjusts;
// *scheduler.Scheduler implements it.
type EndpointTarget interface {
	SetEndpointLimit(pool, endpoint string, n int) error
	SetEndpointHealth(pool, endpoint string, healthy bool) error
	SetEndpointLoad(pool, endpoint string, l scheduler.EndpointLoad) error
}

// Config configures one pool's watcher.
type Config struct {
	// Pool is the pool name passed to Target.SetLimit; required.
	Pool string
	// Endpoint, when set, makes this the watcher of one endpoint of the
	// pool: it sets that endpoint's limit, load and health (the target must
	// be an EndpointTarget), and a failed scrape drains the endpoint until
	// the next good one. Empty: the pool's limit (Target.SetLimit).
	Endpoint string
	// URL is the engine's Prometheus endpoint; required.
	URL string
	// Interval between scrapes; 0 means 1s.
	Interval time.Duration
	// StaleAfter: when the last good sample is older, the limit falls back
	// to the static capacity (Rule.Max); 0 means three intervals.
	StaleAfter time.Duration
	// Rule adapts the limit; Rule.Max is the static capacity.
	Rule Rule
	// Client makes the requests; nil means a client with a timeout of one
	// interval.
	Client *http.Client
}

// maxBody bounds a /metrics response.
const maxBody = 8 << 20

// Status is the watcher's view, for admin pages and tests.
type Status struct {
	// Limit is the last limit set on the target.
	Limit int
	// Last is the last good sample and LastAt when it was taken (zero
	// before the first).
	Last   Sample
	LastAt time.Time
	// Stale is true while the limit is the static fallback because no good
	// sample is recent enough.
	Stale bool
	// Scrapes and Failures count attempts and failed ones; Err is the last
	// failure.
	Scrapes, Failures int
	Err               error
	// Drained is true while an endpoint watcher keeps its endpoint drained
	// (the last scrape failed).
	Drained bool
}

// Watcher scrapes one engine and keeps its pool's limit adapted. Run owns
// the scraping goroutine's state; Status reads a copy under a mutex.
type Watcher struct {
	cfg    Config
	target Target
	clk    clock.Clock

	mu     sync.Mutex
	status Status
}

// New validates cfg; clk nil means the real clock.
func New(cfg Config, target Target, clk clock.Clock) (*Watcher, error) {
	var errs []error
	if cfg.Pool == "" {
		errs = append(errs, errors.New("capacity: pool must be set"))
	}
	if cfg.URL == "" {
		errs = append(errs, errors.New("capacity: metrics.url must be set"))
	}
	if cfg.Interval < 0 || cfg.StaleAfter < 0 {
		errs = append(errs, fmt.Errorf("capacity: metrics.interval %v and stale_after %v must not be negative", cfg.Interval, cfg.StaleAfter))
	}
	if cfg.Rule.Max < 1 {
		errs = append(errs, fmt.Errorf("capacity: max_inflight %d must be at least 1", cfg.Rule.Max))
	}
	if target == nil {
		errs = append(errs, errors.New("capacity: target must be set"))
	} else if _, ok := target.(EndpointTarget); cfg.Endpoint != "" && !ok {
		errs = append(errs, fmt.Errorf("capacity: target %T cannot set endpoint limits", target))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if cfg.Interval == 0 {
		cfg.Interval = time.Second
	}
	if cfg.StaleAfter == 0 {
		cfg.StaleAfter = 3 * cfg.Interval
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: cfg.Interval}
	}
	if clk == nil {
		clk = clock.Real{}
	}
	cfg.Rule = cfg.Rule.defaults()
	return &Watcher{cfg: cfg, target: target, clk: clk, status: Status{Limit: cfg.Rule.Max, Stale: true}}, nil
}

// Run scrapes every interval until ctx ends, then returns ctx's error. The
// limit starts at the static capacity.
func (w *Watcher) Run(ctx context.Context) error {
	t := w.clk.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C():
		}
		w.once(ctx)
		t.Reset(w.cfg.Interval)
	}
}

func (w *Watcher) once(ctx context.Context) {
	s, err := w.scrape(ctx)
	now := w.clk.Now()
	w.mu.Lock()
	st := w.status
	w.mu.Unlock()
	st.Scrapes++
	if err != nil {
		st.Failures++
		st.Err = err
	} else {
		st.Last, st.LastAt, st.Err = s, now, nil
	}
	next := st.Limit
	if st.LastAt.IsZero() || now.Sub(st.LastAt) > w.cfg.StaleAfter {
		st.Stale, next = true, w.cfg.Rule.Max
	} else if err == nil {
		st.Stale = false
		next = w.cfg.Rule.Next(next, s)
	}
	if w.cfg.Endpoint != "" {
		w.endpoint(&st, s, err == nil, next)
	} else if next != st.Limit || st.Scrapes == 1 {
		if err := w.target.SetLimit(w.cfg.Pool, next); err != nil {
			st.Err = err
		}
		st.Limit = next
	}
	w.mu.Lock()
	w.status = st
	w.mu.Unlock()
}

func (w *Watcher) scrape(ctx context.Context) (Sample, error) {
	return Scrape(ctx, w.cfg.Client, w.cfg.URL)
}

// Scrape reads an engine's /metrics at url with client (at most maxBody
// bytes) and parses it (Parse); errors name the URL.
func Scrape(ctx context.Context, client *http.Client, url string) (Sample, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return Sample{}, fmt.Errorf("capacity: %w", err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return Sample{}, fmt.Errorf("capacity: scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Sample{}, fmt.Errorf("capacity: scrape %s: status %s", url, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return Sample{}, fmt.Errorf("capacity: scrape %s: %w", url, err)
	}
	if len(body) > maxBody {
		return Sample{}, fmt.Errorf("capacity: scrape %s: body over %d bytes", url, maxBody)
	}
	s, err := Parse(body)
	if err != nil {
		return Sample{}, fmt.Errorf("capacity: scrape %s: %w", url, err)
	}
	return s, nil
}

// endpoint applies a scrape to the watched endpoint: its limit, its load
// report after a good scrape, and its health (drained after a failed
// scrape, back after a good one).
func (w *Watcher) endpoint(st *Status, s Sample, ok bool, next int) {
	t := w.target.(EndpointTarget)
	pool, ep := w.cfg.Pool, w.cfg.Endpoint
	keep := func(err error) {
		if err != nil {
			st.Err = err
		}
	}
	if next != st.Limit || st.Scrapes == 1 {
		keep(t.SetEndpointLimit(pool, ep, next))
		st.Limit = next
	}
	if ok {
		keep(t.SetEndpointLoad(pool, ep, scheduler.EndpointLoad{Running: int(s.Running), Waiting: int(s.Waiting), KVUsage: s.KVUsage}))
	}
	if drained := !ok; drained != st.Drained || st.Scrapes == 1 {
		keep(t.SetEndpointHealth(pool, ep, ok))
		st.Drained = drained
	}
}

// Status returns a copy of the watcher's state.
func (w *Watcher) Status() Status {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.status
}
