package sim

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// BenchmarkOneHourTrace simulates one hour of traffic in virtual time
// through the engine alone: ~19k requests (Poisson, 5.3/s), prompts of
// 100-4000 tokens, outputs of 20-800, three priority levels. One op is the
// whole hour; the metric virtual-s/wall-s says how much faster than real
// time it runs.
func BenchmarkOneHourTrace(b *testing.B) {
	for _, pol := range []Policy{FCFS, Priority} {
		b.Run(pol.String(), func(b *testing.B) {
			type arrival struct {
				at   time.Duration
				spec SeqSpec
			}
			rng := rand.New(rand.NewPCG(1, 2))
			var trace []arrival
			for t, id := time.Duration(0), uint64(0); t < time.Hour; id++ {
				t += time.Duration(rng.ExpFloat64() / 5.3 * float64(time.Second))
				trace = append(trace, arrival{at: t, spec: SeqSpec{
					ID:           id,
					PromptTokens: 100 + int(math.Exp(rng.Float64()*math.Log(40))*100) - 100,
					MaxTokens:    20 + rng.IntN(780),
					Priority:     rng.IntN(3),
				}})
			}
			var steps, seqSteps int64
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				e := newTestEngine(b, Config{Policy: pol})
				start := time.Unix(0, 0)
				now, next := start, 0
				for next < len(trace) || !e.Idle() {
					for next < len(trace) && !start.Add(trace[next].at).After(now) {
						if err := e.Add(trace[next].spec); err != nil {
							b.Fatal(err)
						}
						next++
					}
					r := e.Step(now)
					if r.Duration == 0 {
						now = start.Add(trace[next].at) // idle: jump to the next arrival
						continue
					}
					steps++
					seqSteps += int64(len(r.Events))
					now = r.End()
				}
			}
			b.ReportMetric(float64(len(trace)), "requests")
			b.ReportMetric(float64(steps)/float64(b.N), "steps/op")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(seqSteps), "ns/seq-step")
			b.ReportMetric(float64(b.N)*3600/b.Elapsed().Seconds(), "virtual-s/wall-s")
		})
	}
}
