package client

import (
	"strconv"
	"strings"

	"github.com/llmesh/llmesh/bench/result"
)

// maxServerTiming bounds what readServerTiming parses.
const maxServerTiming = 4 << 10

// readServerTiming reads llmesh's Server-Timing entries, when a gateway or
// filter in front of the engine sent them (header and trailer):
// queue;dur=MS is the time the request waited for admission, and
// preemptions;desc="N" how often it was preempted (a requeue or a
// continuation the client could not see). Unknown entries and bad values
// are ignored: the header is a hint, never a reason to fail a request.
func readServerTiming(rec *result.Record, values []string) {
	for _, v := range values {
		if len(v) > maxServerTiming {
			v = v[:maxServerTiming]
		}
		for _, entry := range strings.Split(v, ",") {
			parts := strings.Split(entry, ";")
			name := strings.ToLower(strings.TrimSpace(parts[0]))
			for _, p := range parts[1:] {
				k, val, ok := strings.Cut(strings.TrimSpace(p), "=")
				if !ok {
					continue
				}
				val = strings.Trim(strings.TrimSpace(val), `"`)
				switch {
				case name == "queue" && strings.EqualFold(k, "dur"):
					ms, err := strconv.ParseFloat(val, 64)
					if err != nil || ms < 0 || ms > 1e9 {
						continue
					}
					if rec.LLMesh == nil {
						rec.LLMesh = &result.ServerTimes{}
					}
					rec.LLMesh.QueueNS = int64(ms * 1e6)
					rec.LLMesh.HasQueue = true
				case name == "preemptions" && strings.EqualFold(k, "desc"):
					n, err := strconv.Atoi(val)
					if err != nil || n < 0 || n > 1<<20 {
						continue
					}
					if rec.LLMesh == nil {
						rec.LLMesh = &result.ServerTimes{}
					}
					rec.LLMesh.Preemptions = n
					rec.Preemptions = n
				}
			}
		}
	}
}
