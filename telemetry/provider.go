package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/otlptranslator"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	promexporter "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/llmesh/llmesh/config"
)

// DefaultOTLPInterval is how often metrics are pushed over OTLP.
const DefaultOTLPInterval = 10 * time.Second

// Options configure a Provider. The zero value gives working meter and
// tracer providers that export nothing (useful with Readers in tests).
type Options struct {
	// ServiceName is the service.name resource attribute; "" means "llmesh".
	ServiceName string
	// Prometheus enables the Prometheus exporter (see PrometheusHandler).
	Prometheus bool
	// OTLPEndpoint is host:port of an OTLP/gRPC collector; "" disables OTLP.
	OTLPEndpoint string
	// OTLPInsecure uses plaintext gRPC (a collector on loopback or a
	// sidecar).
	OTLPInsecure bool
	// OTLPInterval is the metric push interval; 0 means DefaultOTLPInterval.
	OTLPInterval time.Duration
	// Readers are extra metric readers (for example a ManualReader in tests).
	Readers []sdkmetric.Reader
	// SpanProcessors are extra span processors (for example a SpanRecorder).
	// With neither these nor OTLPEndpoint the Recorder makes no spans.
	SpanProcessors []sdktrace.SpanProcessor
	// Recorder configures the Provider's Recorder.
	Recorder RecorderOptions
}

// OptionsFromConfig maps the mesh config's telemetry section.
func OptionsFromConfig(t config.Telemetry) Options {
	return Options{
		ServiceName:  t.ServiceName,
		Prometheus:   t.PrometheusPath != "",
		OTLPEndpoint: t.OTLPEndpoint,
		OTLPInsecure: t.OTLPInsecure,
		OTLPInterval: t.OTLPInterval,
	}
}

// Provider owns a host's metric and trace pipelines.
type Provider struct {
	// MeterProvider and TracerProvider are the SDK providers; hosts may
	// create their own instruments from them.
	MeterProvider  *sdkmetric.MeterProvider
	TracerProvider *sdktrace.TracerProvider
	// Recorder records Observations into MeterProvider and TracerProvider
	// (its per-request metrics through its own aggregation, which the
	// Provider's readers collect; see New).
	Recorder *Recorder

	registry *prometheus.Registry
}

// New builds the pipelines. It does no network IO: OTLP exporters connect
// lazily, so a collector that is down does not stop the host.
func New(ctx context.Context, opts Options) (*Provider, error) {
	name := opts.ServiceName
	if name == "" {
		name = "llmesh"
	}
	res := resource.NewSchemaless(attribute.String("service.name", name))
	mopts := []sdkmetric.Option{sdkmetric.WithResource(res)}
	topts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	p := &Provider{}
	// The Recorder's per-request instruments are aggregated by the
	// Recorder and produced to the readers made here (see aggregation),
	// when those readers would get the same from the SDK: readers a caller
	// brings cannot be given a producer after they are made, an exemplar
	// filter that keeps exemplars without a span would make the SDK's
	// output differ, and so would an OTLP exporter configured (through
	// its environment) for delta temporality or other histograms. Then
	// they stay SDK instruments and every reader sees them.
	aggregate := len(opts.Readers) == 0 && (opts.Prometheus || opts.OTLPEndpoint != "") && !sdkKeepsExemplars()
	var (
		mexp *otlpmetricgrpc.Exporter
		texp *otlptrace.Exporter
	)
	if opts.OTLPEndpoint != "" {
		mo := []otlpmetricgrpc.Option{otlpmetricgrpc.WithEndpoint(opts.OTLPEndpoint)}
		to := []otlptracegrpc.Option{otlptracegrpc.WithEndpoint(opts.OTLPEndpoint)}
		if opts.OTLPInsecure {
			mo = append(mo, otlpmetricgrpc.WithInsecure())
			to = append(to, otlptracegrpc.WithInsecure())
		}
		var err error
		mexp, err = otlpmetricgrpc.New(ctx, mo...)
		if err != nil {
			return nil, fmt.Errorf("telemetry: otlp metric exporter for %q: %w", opts.OTLPEndpoint, err)
		}
		texp, err = otlptracegrpc.New(ctx, to...)
		if err != nil {
			_ = mexp.Shutdown(ctx)
			return nil, fmt.Errorf("telemetry: otlp trace exporter for %q: %w", opts.OTLPEndpoint, err)
		}
		aggregate = aggregate && defaultAggregation(mexp)
	}
	var agg *aggregation
	if aggregate {
		readers := 0
		if opts.Prometheus {
			readers++
		}
		if mexp != nil {
			readers++
		}
		agg = newAggregation(readers)
	}
	if opts.Prometheus {
		p.registry = prometheus.NewRegistry()
		p.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		popts := []promexporter.Option{
			promexporter.WithRegisterer(p.registry),
			promexporter.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes),
			promexporter.WithoutScopeInfo(),
		}
		if agg != nil {
			popts = append(popts, promexporter.WithProducer(agg.producer(0)))
		}
		exp, err := promexporter.New(popts...)
		if err != nil {
			if mexp != nil {
				_ = mexp.Shutdown(ctx)
				_ = texp.Shutdown(ctx)
			}
			return nil, fmt.Errorf("telemetry: prometheus exporter: %w", err)
		}
		mopts = append(mopts, sdkmetric.WithReader(exp))
	}
	if mexp != nil {
		interval := opts.OTLPInterval
		if interval <= 0 {
			interval = DefaultOTLPInterval
		}
		ropts := []sdkmetric.PeriodicReaderOption{sdkmetric.WithInterval(interval)}
		if agg != nil {
			ropts = append(ropts, sdkmetric.WithProducer(agg.producer(agg.readers-1)))
		}
		mopts = append(mopts, sdkmetric.WithReader(sdkmetric.NewPeriodicReader(mexp, ropts...)))
		topts = append(topts, sdktrace.WithBatcher(texp))
	}
	for _, r := range opts.Readers {
		mopts = append(mopts, sdkmetric.WithReader(r))
	}
	for _, sp := range opts.SpanProcessors {
		topts = append(topts, sdktrace.WithSpanProcessor(sp))
	}
	p.MeterProvider = sdkmetric.NewMeterProvider(mopts...)
	p.TracerProvider = sdktrace.NewTracerProvider(topts...)
	// Without OTLP or span processors no span the Recorder makes could be
	// exported: it gets no tracer, so that Trace costs nothing (spans
	// built for the SDK with no processor cost about as much as recording
	// the request's metrics). Span processors for its spans are passed in
	// Options.SpanProcessors, not registered on TracerProvider afterwards.
	var rtp trace.TracerProvider
	if opts.OTLPEndpoint != "" || len(opts.SpanProcessors) > 0 {
		rtp = p.TracerProvider
	}
	rec, err := newRecorder(p.MeterProvider, rtp, opts.Recorder, agg)
	if err != nil {
		_ = p.Shutdown(ctx)
		return nil, err
	}
	p.Recorder = rec
	return p, nil
}

// defaultAggregation reports whether exp takes the SDK's default
// aggregation and cumulative temporality for histograms and counters,
// which is what the Recorder's aggregation produces.
func defaultAggregation(exp sdkmetric.Exporter) bool {
	for _, k := range []sdkmetric.InstrumentKind{sdkmetric.InstrumentKindHistogram, sdkmetric.InstrumentKindCounter} {
		if exp.Temporality(k) != metricdata.CumulativeTemporality || !reflect.DeepEqual(exp.Aggregation(k), sdkmetric.DefaultAggregationSelector(k)) {
			return false
		}
	}
	return true
}

// PrometheusHandler serves the metrics in the Prometheus text format; it
// answers 404 when the Prometheus exporter is disabled.
func (p *Provider) PrometheusHandler() http.Handler {
	if p.registry == nil {
		return http.NotFoundHandler()
	}
	return promhttp.HandlerFor(p.registry, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// Registry is the Prometheus registry behind PrometheusHandler (nil when
// disabled); hosts may register their own collectors in it.
func (p *Provider) Registry() *prometheus.Registry { return p.registry }

// ForceFlush pushes pending metrics and spans to the exporters.
func (p *Provider) ForceFlush(ctx context.Context) error {
	return errors.Join(p.MeterProvider.ForceFlush(ctx), p.TracerProvider.ForceFlush(ctx))
}

// Shutdown flushes and stops the exporters and their goroutines.
func (p *Provider) Shutdown(ctx context.Context) error {
	var errs []error
	if p.MeterProvider != nil {
		errs = append(errs, p.MeterProvider.Shutdown(ctx))
	}
	if p.TracerProvider != nil {
		errs = append(errs, p.TracerProvider.Shutdown(ctx))
	}
	return errors.Join(errs...)
}
