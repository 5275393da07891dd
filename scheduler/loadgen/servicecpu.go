package loadgen

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// cpuMetric is the Prometheus process collector's counter of the CPU time
// (user and system) a process has used.
const cpuMetric = "process_cpu_seconds_total"

// PrometheusCPU returns a reader of the CPU time a service has used so far,
// from process_cpu_seconds_total on its Prometheus endpoint url (scheduler
// serve --admin ADDR serves it at http://ADDR/metrics), for
// Options.ServiceCPU. A nil hc means a client with a 5 s timeout.
func PrometheusCPU(url string, hc *http.Client) func(context.Context) (time.Duration, error) {
	if hc == nil {
		hc = &http.Client{Timeout: 5 * time.Second}
	}
	return func(ctx context.Context) (time.Duration, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return 0, err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return 0, fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		s, err := ParseCPUSeconds(resp.Body)
		if err != nil {
			return 0, fmt.Errorf("GET %s: %w", url, err)
		}
		return time.Duration(s * float64(time.Second)), nil
	}
}

// ParseCPUSeconds reads process_cpu_seconds_total from a Prometheus text
// exposition (the sample without labels; the first one if there are
// several).
func ParseCPUSeconds(r io.Reader) (float64, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for line := 1; sc.Scan(); line++ {
		rest, ok := strings.CutPrefix(sc.Text(), cpuMetric)
		if !ok || rest == "" || (rest[0] != ' ' && rest[0] != '\t') {
			continue // another metric, a comment, or one with labels
		}
		// "value [timestamp]"
		fields := strings.Fields(rest)
		if len(fields) < 1 || len(fields) > 2 {
			return 0, fmt.Errorf("line %d: %s: want a value and at most a timestamp, got %q", line, cpuMetric, rest)
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
			return 0, fmt.Errorf("line %d: %s: %q is not a count of seconds", line, cpuMetric, fields[0])
		}
		return v, nil
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, errors.New(cpuMetric + ": not in the exposition (is it the admin /metrics of scheduler serve?)")
}
