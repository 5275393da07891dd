package telemetry

import (
	"context"
	"errors"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/llmesh/llmesh/exchange"
)

// Per-arm metric names: what an A/B experiment compares, labelled by
// experiment, arm and class (and, on requests, outcome and SLO
// attainment). They come on top of the per-class instruments, which every
// request records as well.
const (
	MetricArmRequests = "llmesh.arm.requests"
	MetricArmTTFT     = "llmesh.arm.time_to_first_token"
	MetricArmTPOT     = "llmesh.arm.time_per_output_token"
	MetricArmQueue    = "llmesh.arm.queue.duration"
)

// Attribute keys of the per-arm instruments.
const (
	AttrExperiment = attribute.Key("llmesh.experiment")
	AttrArm        = attribute.Key("llmesh.arm")
)

// ArmRecorder records requests served by an experiment arm. Experiment,
// arm and class names come from the mesh config, so the label set is
// bounded by it. Safe for concurrent use.
type ArmRecorder struct {
	requests          metric.Int64Counter
	ttft, tpot, queue metric.Float64Histogram
	slos              map[string]exchange.Class

	mu     sync.Mutex
	series map[armKey]*armSeries
}

type armKey struct{ class, experiment, arm string }

// armSeries is series for the per-arm instruments: the attribute sets of
// one (experiment, arm, class), built once.
type armSeries struct {
	base []metric.RecordOption
	// requests[k][met] adds llmesh.outcome (error kind k) and
	// llmesh.slo.met.
	requests [][2][]metric.AddOption
}

// maxArmSeries bounds the cached label sets. Experiment, arm and class
// come from the mesh config, so real meshes stay far below it; past it
// the sets are built per call, which records the same series.
const maxArmSeries = 4096

// NewArmRecorder creates the per-arm instruments on mp (nil: a no-op
// provider); opts.Classes give the SLOs that llmesh.slo.met is judged
// against, as for Recorder.
func NewArmRecorder(mp metric.MeterProvider, opts RecorderOptions) (*ArmRecorder, error) {
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	m := mp.Meter("github.com/llmesh/llmesh/telemetry")
	r := &ArmRecorder{slos: map[string]exchange.Class{}, series: map[armKey]*armSeries{}}
	for _, c := range opts.Classes {
		r.slos[c.Name] = c
	}
	var errs []error
	fh := func(name, desc string, b []float64) metric.Float64Histogram {
		h, err := m.Float64Histogram(name, metric.WithDescription(desc), metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(b...))
		errs = append(errs, err)
		return h
	}
	var err error
	r.requests, err = m.Int64Counter(MetricArmRequests, metric.WithDescription("Finished requests per experiment arm, by outcome and SLO attainment."), metric.WithUnit("{request}"))
	errs = append(errs, err)
	r.ttft = fh(MetricArmTTFT, "Proxy-side time to first token per experiment arm (includes queue time).", BucketsTTFT)
	r.tpot = fh(MetricArmTPOT, "Per request (E2E - TTFT) / (output tokens - 1), per experiment arm.", BucketsTPOT)
	r.queue = fh(MetricArmQueue, "Time from request received to scheduler admission, per experiment arm.", BucketsQueue)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return r, nil
}

// Record records one finished request that experiment's arm served.
func (r *ArmRecorder) Record(obs exchange.Observation, class, experiment, arm string) {
	ctx := context.Background()
	s := r.labels(class, experiment, arm)
	if !obs.Admitted.IsZero() {
		r.queue.Record(ctx, obs.QueueTime.Seconds(), s.base...)
	}
	if obs.HasTTFT {
		r.ttft.Record(ctx, obs.TTFT.Seconds(), s.base...)
	}
	if obs.HasTPOT {
		r.tpot.Record(ctx, obs.TPOT.Seconds(), s.base...)
	}
	met := 0
	if JudgeSLO(&obs, r.slos[class]).Met {
		met = 1
	}
	r.requests.Add(ctx, 1, s.requests[errorIndex(obs.ErrorKind)][met]...)
}

// labels returns the cached sets of (class, experiment, arm), or freshly
// built ones once maxArmSeries are cached.
func (r *ArmRecorder) labels(class, experiment, arm string) *armSeries {
	k := armKey{class, experiment, arm}
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.series[k]
	if s == nil {
		s = newArmSeries(k)
		if len(r.series) < maxArmSeries {
			r.series[k] = s
		}
	}
	return s
}

func newArmSeries(k armKey) *armSeries {
	e, a, c := AttrExperiment.String(k.experiment), AttrArm.String(k.arm), AttrClass.String(k.class)
	set := func(kvs ...attribute.KeyValue) metric.MeasurementOption {
		return metric.WithAttributeSet(attribute.NewSet(append([]attribute.KeyValue{e, a, c}, kvs...)...))
	}
	s := &armSeries{base: []metric.RecordOption{set()}, requests: make([][2][]metric.AddOption, errorKinds)}
	for i := range errorKinds {
		outcome := errorName(i)
		if outcome == "" {
			outcome = "ok"
		}
		for met := range 2 {
			s.requests[i][met] = []metric.AddOption{set(attribute.String("llmesh.outcome", outcome), AttrSLOMet.Bool(met == 1))}
		}
	}
	return s
}
