package loadgen

import (
	"fmt"
	"io"
	"strings"
)

// WriteText writes the report as a few lines for a terminal.
func (r Report) WriteText(w io.Writer) error {
	var b strings.Builder
	if r.Mode == "open" {
		fmt.Fprintf(&b, "scheduler bench: open loop, %d proxies, target %.0f/s (%s arrivals), %.1f s measured\n",
			r.Proxies, r.TargetRate, r.Arrivals, r.DurationS)
	} else {
		fmt.Fprintf(&b, "scheduler bench: closed loop, %d proxies, %d in flight, %.1f s measured\n", r.Proxies, r.Inflight, r.DurationS)
	}
	if r.Wire != "" {
		fmt.Fprintf(&b, "wire           %s\n", r.Wire)
	}
	fmt.Fprintf(&b, "admissions     %d (%.0f/s) of %d sent\n", r.Admissions, r.AdmissionsPerS, r.Sent)
	q := func(name string, x Quantiles) {
		fmt.Fprintf(&b, "%-14s p50 %.0f µs, p99 %.0f µs, p99.9 %.0f µs, max %.0f µs (%d samples)\n", name, x.P50, x.P99, x.P999, x.Max, x.N)
	}
	q("decision", r.Decision)
	if r.Queued.N > 0 {
		q("  queued", r.Queued)
	}
	if r.FromScheduled != nil {
		q("from schedule", *r.FromScheduled)
	}
	if r.ScheduleLag != nil {
		q("schedule lag", *r.ScheduleLag)
	}
	fmt.Fprintf(&b, "rejected %d, errors %d, dropped %d\n", r.Rejected, r.Errors, r.Dropped)
	switch c := r.ServiceCPU; {
	case c == nil:
	case c.Error != "":
		fmt.Fprintf(&b, "service CPU per admission: unknown (%s)\n", c.Error)
	default:
		fmt.Fprintf(&b, "service CPU per admission: %.1f µs (%.2f s over the measured window)\n", c.PerAdmissionUS, c.Seconds)
	}
	for _, s := range r.ErrorSamples {
		fmt.Fprintf(&b, "  error: %s\n", s)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
