package exchange

import (
	"strconv"
	"time"
)

// ServerTiming formats obs as a Server-Timing header (or trailer) value,
// durations in milliseconds:
//
//	queue;dur=1.204, ttft;dur=85.3, upstream-ttft;dur=84.1, tpot;dur=12.5, e2e;dur=950.2, tokens;desc="64"
//
// Entries whose measurement does not exist yet are left out, so a host can
// send the queue time in response headers and the rest in trailers.
func ServerTiming(obs *Observation) string {
	return string(appendServerTiming(make([]byte, 0, 128), obs))
}

// appendServerTiming is ServerTiming appending to dst, for hosts that keep
// a buffer.
func appendServerTiming(dst []byte, obs *Observation) []byte {
	start := len(dst)
	entry := func(name string, d time.Duration) {
		if len(dst) > start {
			dst = append(dst, ", "...)
		}
		dst = append(dst, name...)
		dst = append(dst, ";dur="...)
		dst = strconv.AppendFloat(dst, float64(d)/float64(time.Millisecond), 'f', 3, 64)
	}
	if !obs.Admitted.IsZero() && !obs.Received.IsZero() {
		entry("queue", obs.QueueTime)
	}
	if obs.HasTTFT {
		entry("ttft", obs.TTFT)
		if !obs.UpstreamSent.IsZero() {
			entry("upstream-ttft", obs.UpstreamTTFT)
		}
	}
	if obs.HasTPOT {
		entry("tpot", obs.TPOT)
	}
	if obs.E2E > 0 {
		entry("e2e", obs.E2E)
	}
	if obs.OutputTokens > 0 {
		if len(dst) > start {
			dst = append(dst, ", "...)
		}
		dst = append(dst, `tokens;desc="`...)
		dst = strconv.AppendInt(dst, int64(obs.OutputTokens), 10)
		dst = append(dst, '"')
	}
	return dst
}
