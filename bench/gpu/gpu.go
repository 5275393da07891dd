//go:build nvml

package gpu

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/llmesh/llmesh/bench/result"
	"github.com/llmesh/llmesh/clock"
)

// Sampler samples every device at a fixed interval.
type Sampler struct {
	clk     clock.Clock
	start   time.Time
	cancel  context.CancelFunc
	done    chan struct{}
	devs    []nvml.Device
	acc     []*acc
	stopped sync.Once
	out     *result.GPU
}

type acc struct {
	d                       result.GPUDevice
	sm, mem, power, smc, mc float64 // sums
}

// maxSeries bounds the per-device chart series; long runs are thinned.
const maxSeries = 600

// Start initializes NVML and samples every interval until Stop. It returns
// nil and a note when telemetry is unavailable; a nil *Sampler's Stop
// returns (nil, "").
func Start(ctx context.Context, interval time.Duration, clk clock.Clock) (s *Sampler, note string) {
	if clk == nil {
		clk = clock.Real{}
	}
	if interval <= 0 {
		interval = 500 * time.Millisecond
	}
	defer func() {
		// go-nvml loads the library with dlopen; keep an unexpected failure
		// there from taking the benchmark down.
		if r := recover(); r != nil {
			s, note = nil, fmt.Sprintf("no GPU telemetry: NVML failed: %v", r)
		}
	}()
	if ret := nvml.Init(); ret != nvml.SUCCESS {
		return nil, "no GPU telemetry: NVML init: " + errString(ret)
	}
	n, ret := nvml.DeviceGetCount()
	if ret != nvml.SUCCESS || n == 0 {
		_ = nvml.Shutdown() // nothing to do if releasing NVML fails on the way out
		if ret != nvml.SUCCESS {
			return nil, "no GPU telemetry: device count: " + errString(ret)
		}
		return nil, "no GPU telemetry: no NVIDIA GPU found"
	}
	s = &Sampler{clk: clk, start: clk.Now(), done: make(chan struct{})}
	for i := 0; i < n; i++ {
		d, ret := nvml.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			continue
		}
		a := &acc{d: result.GPUDevice{Index: i}}
		a.d.Name, _ = d.GetName()
		a.d.UUID, _ = d.GetUUID()
		if m, ret := d.GetMemoryInfo(); ret == nvml.SUCCESS {
			a.d.MemTotalMiB = float64(m.Total) / (1 << 20)
		}
		s.devs = append(s.devs, d)
		s.acc = append(s.acc, a)
	}
	if len(s.devs) == 0 {
		_ = nvml.Shutdown() // nothing to do if releasing NVML fails on the way out
		return nil, "no GPU telemetry: no device handle could be opened"
	}
	ctx, s.cancel = context.WithCancel(ctx)
	s.sample()
	go s.loop(ctx, interval)
	return s, ""
}

func errString(r nvml.Return) string {
	if r == nvml.ERROR_LIBRARY_NOT_FOUND {
		return "NVML library (libnvidia-ml.so.1) not found"
	}
	return nvml.ErrorString(r)
}

func (s *Sampler) loop(ctx context.Context, interval time.Duration) {
	defer close(s.done)
	t := s.clk.NewTimer(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			s.sample()
			t.Reset(interval)
		}
	}
}

// sample reads every device once; readings a device does not support are
// skipped.
func (s *Sampler) sample() {
	at := s.clk.Since(s.start).Seconds()
	for i, d := range s.devs {
		a := s.acc[i]
		a.d.Samples++
		var smu, pw float64
		if u, ret := d.GetUtilizationRates(); ret == nvml.SUCCESS {
			smu = float64(u.Gpu)
			a.sm += smu
			a.mem += float64(u.Memory)
			a.d.SMUtilMax = math.Max(a.d.SMUtilMax, smu)
		}
		if m, ret := d.GetMemoryInfo(); ret == nvml.SUCCESS {
			a.d.MemUsedMaxMiB = math.Max(a.d.MemUsedMaxMiB, float64(m.Used)/(1<<20))
		}
		if p, ret := d.GetPowerUsage(); ret == nvml.SUCCESS {
			pw = float64(p) / 1000
			a.power += pw
			a.d.PowerMaxW = math.Max(a.d.PowerMaxW, pw)
		}
		if c, ret := d.GetClockInfo(nvml.CLOCK_SM); ret == nvml.SUCCESS {
			a.smc += float64(c)
		}
		if c, ret := d.GetClockInfo(nvml.CLOCK_MEM); ret == nvml.SUCCESS {
			a.mc += float64(c)
		}
		if len(a.d.Series) < maxSeries {
			a.d.Series = append(a.d.Series, [3]float64{math.Round(at*1000) / 1000, smu, pw})
		} else {
			// Keep every other point so the series spans the whole run.
			half := a.d.Series[:0]
			for j := 0; j < len(a.d.Series); j += 2 {
				half = append(half, a.d.Series[j])
			}
			a.d.Series = append(half, [3]float64{at, smu, pw})
		}
	}
}

// Stop ends sampling, shuts NVML down and returns the summary.
func (s *Sampler) Stop() (*result.GPU, string) {
	if s == nil {
		return nil, ""
	}
	s.stopped.Do(func() {
		s.cancel()
		<-s.done
		s.sample()
		_ = nvml.Shutdown() // nothing to do if releasing NVML fails on the way out
		g := &result.GPU{}
		for _, a := range s.acc {
			n := float64(a.d.Samples)
			a.d.SMUtilMean = round1(a.sm / n)
			a.d.MemUtilMean = round1(a.mem / n)
			a.d.PowerMeanW = round1(a.power / n)
			a.d.SMClockMeanMHz = round1(a.smc / n)
			a.d.MemClockMeanMHz = round1(a.mc / n)
			g.Devices = append(g.Devices, a.d)
		}
		s.out = g
	})
	return s.out, ""
}

func round1(v float64) float64 { return math.Round(v*10) / 10 }
