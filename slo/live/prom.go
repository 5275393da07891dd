// Package live builds the per-class SLO report of a live mesh from the
// metrics Prometheus scraped from its hosts (`llmesh report slo`), in the
// bench's report shape (bench/result.Report), so bench/report renders
// both and one reader serves both.
package live

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Sample is one series of an instant query's vector.
type Sample struct {
	Labels map[string]string
	Value  float64
}

// Series is one series of a range query's matrix.
type Series struct {
	Labels map[string]string
	Points []Point
}

// Point is one value of a range query.
type Point struct {
	T time.Time
	V float64
}

// Querier runs PromQL. Client is the implementation over Prometheus's
// HTTP API.
type Querier interface {
	Query(ctx context.Context, expr string, at time.Time) ([]Sample, error)
	QueryRange(ctx context.Context, expr string, start, end time.Time, step time.Duration) ([]Series, error)
}

var _ Querier = (*Client)(nil)

// Client queries Prometheus's HTTP API (/api/v1/query, /api/v1/query_range).
type Client struct {
	// Base is the server's URL, e.g. http://127.0.0.1:9090.
	Base string
	// HTTP is the client used; nil means one with a 30 s timeout.
	HTTP *http.Client
}

// MaxResponseBytes bounds one answer.
const MaxResponseBytes = 64 << 20

// Query runs an instant query at at.
func (c *Client) Query(ctx context.Context, expr string, at time.Time) ([]Sample, error) {
	v := url.Values{"query": {expr}, "time": {formatTime(at)}}
	body, err := c.get(ctx, "/api/v1/query", v)
	if err != nil {
		return nil, err
	}
	return ParseVector(body)
}

// QueryRange runs a range query.
func (c *Client) QueryRange(ctx context.Context, expr string, start, end time.Time, step time.Duration) ([]Series, error) {
	v := url.Values{"query": {expr}, "start": {formatTime(start)}, "end": {formatTime(end)},
		"step": {strconv.FormatFloat(step.Seconds(), 'f', -1, 64)}}
	body, err := c.get(ctx, "/api/v1/query_range", v)
	if err != nil {
		return nil, err
	}
	return ParseMatrix(body)
}

func formatTime(t time.Time) string {
	return strconv.FormatFloat(float64(t.UnixNano())/1e9, 'f', 3, 64)
}

func (c *Client) get(ctx context.Context, path string, v url.Values) ([]byte, error) {
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	u := strings.TrimRight(c.Base, "/") + path + "?" + v.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("prometheus: %w", err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("prometheus: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxResponseBytes+1))
	if err != nil {
		return nil, fmt.Errorf("prometheus: reading %s: %w", path, err)
	}
	if len(body) > MaxResponseBytes {
		return nil, fmt.Errorf("prometheus: %s answer larger than %d bytes", path, MaxResponseBytes)
	}
	// Prometheus answers errors (400 bad query, 422, 503) with the same
	// JSON envelope; its message says more than the status.
	if resp.StatusCode != http.StatusOK {
		if _, perr := parse(body, ""); perr != nil {
			return nil, fmt.Errorf("prometheus: %s: HTTP %d: %w (query %q)", path, resp.StatusCode, perr, v.Get("query"))
		}
		return nil, fmt.Errorf("prometheus: %s: HTTP %d (query %q)", path, resp.StatusCode, v.Get("query"))
	}
	return body, nil
}

// envelope is the API's answer.
type envelope struct {
	Status    string `json:"status"`
	ErrorType string `json:"errorType"`
	Error     string `json:"error"`
	Data      struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	} `json:"data"`
}

// ErrAPI is wrapped by the errors Prometheus itself reports.
var ErrAPI = errors.New("prometheus API error")

func parse(body []byte, want string) (json.RawMessage, error) {
	var e envelope
	if err := json.Unmarshal(body, &e); err != nil {
		return nil, fmt.Errorf("not a Prometheus API answer: %w", err)
	}
	if e.Status != "success" {
		return nil, fmt.Errorf("%w: %s: %s", ErrAPI, e.ErrorType, e.Error)
	}
	if want != "" && e.Data.ResultType != want {
		return nil, fmt.Errorf("data.resultType: %q, want %q", e.Data.ResultType, want)
	}
	return e.Data.Result, nil
}

// ParseVector reads an instant query's answer.
func ParseVector(body []byte) ([]Sample, error) {
	raw, err := parse(body, "vector")
	if err != nil {
		return nil, err
	}
	var rs []struct {
		Metric map[string]string `json:"metric"`
		Value  []json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal(raw, &rs); err != nil {
		return nil, fmt.Errorf("data.result: %w", err)
	}
	out := make([]Sample, 0, len(rs))
	for i, r := range rs {
		_, v, err := point(r.Value)
		if err != nil {
			return nil, fmt.Errorf("data.result[%d].value: %w", i, err)
		}
		out = append(out, Sample{Labels: r.Metric, Value: v})
	}
	return out, nil
}

// ParseMatrix reads a range query's answer.
func ParseMatrix(body []byte) ([]Series, error) {
	raw, err := parse(body, "matrix")
	if err != nil {
		return nil, err
	}
	var rs []struct {
		Metric map[string]string   `json:"metric"`
		Values [][]json.RawMessage `json:"values"`
	}
	if err := json.Unmarshal(raw, &rs); err != nil {
		return nil, fmt.Errorf("data.result: %w", err)
	}
	out := make([]Series, 0, len(rs))
	for i, r := range rs {
		s := Series{Labels: r.Metric}
		for j, p := range r.Values {
			t, v, err := point(p)
			if err != nil {
				return nil, fmt.Errorf("data.result[%d].values[%d]: %w", i, j, err)
			}
			s.Points = append(s.Points, Point{T: t, V: v})
		}
		out = append(out, s)
	}
	return out, nil
}

// point reads [unix seconds, "value"]; values may be NaN or ±Inf.
func point(p []json.RawMessage) (time.Time, float64, error) {
	if len(p) != 2 {
		return time.Time{}, 0, fmt.Errorf("%d elements, want [time, \"value\"]", len(p))
	}
	var ts float64
	if err := json.Unmarshal(p[0], &ts); err != nil || math.IsNaN(ts) || math.IsInf(ts, 0) || math.Abs(ts) > 1e12 {
		return time.Time{}, 0, fmt.Errorf("time %s is not a number of seconds", p[0])
	}
	var s string
	if err := json.Unmarshal(p[1], &s); err != nil {
		return time.Time{}, 0, fmt.Errorf("value %s is not a string", p[1])
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return time.Time{}, 0, fmt.Errorf("value %q: %w", s, err)
	}
	sec, frac := math.Modf(ts)
	return time.Unix(int64(sec), int64(frac*1e9)).UTC(), v, nil
}
