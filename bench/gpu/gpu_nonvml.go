//go:build !nvml

package gpu

import (
	"context"
	"time"

	"github.com/llmesh/llmesh/bench/result"
	"github.com/llmesh/llmesh/clock"
)

// NoNVML is the note of a binary built without NVML support.
const NoNVML = "no GPU telemetry: this llmesh was built without NVML support (go build -tags nvml, as make build does)"

// Sampler is the NVML sampler; without NVML support there is none.
type Sampler struct{}

// Start reports that this binary has no NVML support.
func Start(context.Context, time.Duration, clock.Clock) (*Sampler, string) { return nil, NoNVML }

// Stop returns (nil, "").
func (*Sampler) Stop() (*result.GPU, string) { return nil, "" }
