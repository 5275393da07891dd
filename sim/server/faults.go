package server

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"
)

// FaultHeader is the request header (gRPC metadata key) that forces a
// failure on one request. Its value is a fault list as ParseFaults reads it.
const FaultHeader = "x-llmesh-sim-fault"

// Fault is a failure to inject into one request.
type Fault struct {
	// Status is an HTTP status to answer with at once instead of running
	// the request: 429, 500, 503, or 400 for "invalid".
	Status int
	// DropAfter > 0 cuts the connection after that many token chunks.
	DropAfter int
	// Stall > 0 pauses the stream for that long (engine clock) after the
	// first token chunk; the engine keeps generating meanwhile.
	Stall time.Duration
}

// Limits on fault values.
const (
	maxFaultStall = time.Hour
	maxFaultList  = 256
)

// ParseFaults reads a comma-separated fault list: "429", "500", "503",
// "invalid", "drop-after=N" (N >= 1), "stall=DURATION" (a Go duration,
// positive, at most 1h). Several entries combine into one Fault: a status
// wins over the stream faults.
func ParseFaults(s string) (Fault, error) {
	var f Fault
	if len(s) > maxFaultList {
		return f, fmt.Errorf("fault %q: longer than %d bytes", s[:32]+"...", maxFaultList)
	}
	var errs []error
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, err := parseFault(part)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if k.Status != 0 {
			f.Status = k.Status
		}
		if k.DropAfter != 0 {
			f.DropAfter = k.DropAfter
		}
		if k.Stall != 0 {
			f.Stall = k.Stall
		}
	}
	return f, errors.Join(errs...)
}

func parseFault(s string) (Fault, error) {
	switch s {
	case "429":
		return Fault{Status: 429}, nil
	case "500":
		return Fault{Status: 500}, nil
	case "503":
		return Fault{Status: 503}, nil
	case "invalid":
		return Fault{Status: 400}, nil
	}
	name, val, ok := strings.Cut(s, "=")
	switch {
	case ok && name == "drop-after":
		n, err := strconv.Atoi(val)
		if err != nil || n < 1 || n > 1<<20 {
			return Fault{}, fmt.Errorf("fault %q: drop-after wants a chunk count in [1, %d]", s, 1<<20)
		}
		return Fault{DropAfter: n}, nil
	case ok && name == "stall":
		d, err := time.ParseDuration(val)
		if err != nil || d <= 0 || d > maxFaultStall {
			return Fault{}, fmt.Errorf("fault %q: stall wants a positive duration up to %v", s, maxFaultStall)
		}
		return Fault{Stall: d}, nil
	}
	return Fault{}, fmt.Errorf("fault %q unknown (want 429, 500, 503, invalid, drop-after=N or stall=DURATION)", s)
}

// injector draws random faults at a configured rate.
type injector struct {
	rate  float64
	kinds []Fault
	mu    sync.Mutex
	rng   *rand.Rand
}

func newInjector(rate float64, kinds []string, seed uint64) (*injector, error) {
	in := &injector{rate: rate, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	if rate < 0 || rate > 1 {
		return nil, fmt.Errorf("fault rate: %v must be in [0, 1]", rate)
	}
	var errs []error
	for _, k := range kinds {
		f, err := parseFault(strings.TrimSpace(k))
		if err != nil {
			errs = append(errs, fmt.Errorf("fault kinds: %w", err))
			continue
		}
		in.kinds = append(in.kinds, f)
	}
	if rate > 0 && len(in.kinds) == 0 && len(errs) == 0 {
		errs = append(errs, errors.New("fault kinds: none given with a positive fault rate"))
	}
	return in, errors.Join(errs...)
}

// draw returns the fault for one request: the header's if it names one,
// else a random one at the configured rate.
func (in *injector) draw(header string) (Fault, error) {
	if header != "" {
		return ParseFaults(header)
	}
	if in.rate <= 0 {
		return Fault{}, nil
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.rng.Float64() >= in.rate {
		return Fault{}, nil
	}
	return in.kinds[in.rng.IntN(len(in.kinds))], nil
}
