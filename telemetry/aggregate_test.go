package telemetry

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

func newProvider(t *testing.T, opts Options) *Provider {
	t.Helper()
	p, err := New(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = p.Shutdown(ctx)
	})
	return p
}

// TestProviderAggregatesOnlyWhenExact checks when a Provider's Recorder
// aggregates: with readers all its own, and only where the SDK's output
// would be the same (no exemplar filter that keeps exemplars without a
// span, an OTLP exporter with cumulative temporality and explicit
// buckets).
func TestProviderAggregatesOnlyWhenExact(t *testing.T) {
	_, addr := startCollector(t)
	for _, tc := range []struct {
		name    string
		env     map[string]string
		opts    Options
		readers int // 0: SDK instruments
	}{
		{name: "prometheus", opts: Options{Prometheus: true}, readers: 1},
		{name: "otlp", opts: Options{OTLPEndpoint: addr, OTLPInsecure: true}, readers: 1},
		{name: "both", opts: Options{Prometheus: true, OTLPEndpoint: addr, OTLPInsecure: true}, readers: 2},
		{name: "no exporter", opts: Options{}},
		{name: "caller's reader", opts: Options{Prometheus: true, Readers: []sdkmetric.Reader{sdkmetric.NewManualReader()}}},
		{name: "exemplars always on", env: map[string]string{"OTEL_METRICS_EXEMPLAR_FILTER": " Always_On "}, opts: Options{Prometheus: true}},
		{name: "exemplars trace based", env: map[string]string{"OTEL_METRICS_EXEMPLAR_FILTER": "trace_based"}, opts: Options{Prometheus: true}, readers: 1},
		{name: "otlp delta", env: map[string]string{"OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE": "delta"},
			opts: Options{Prometheus: true, OTLPEndpoint: addr, OTLPInsecure: true}},
		{name: "otlp cumulative", env: map[string]string{"OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE": "cumulative"},
			opts: Options{OTLPEndpoint: addr, OTLPInsecure: true}, readers: 1},
		{name: "otlp exponential", env: map[string]string{"OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION": "base2_exponential_bucket_histogram"},
			opts: Options{OTLPEndpoint: addr, OTLPInsecure: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			p := newProvider(t, tc.opts)
			got := 0
			if p.Recorder.agg != nil {
				got = p.Recorder.agg.readers
			}
			if got != tc.readers {
				t.Errorf("aggregating for %d readers, want %d (0: SDK instruments)", got, tc.readers)
			}
			p.Recorder.Record(observe(t), "interactive", "llama")
		})
	}
}

// TestAggregationReadersIndependent records the same random requests
// into a Provider with Prometheus and OTLP that aggregates and one that
// records through the SDK (a reader of the caller's makes it), flushing
// OTLP between scrapes: a reader's collections must not change what
// another sees, so the scrapes stay identical.
func TestAggregationReadersIndependent(t *testing.T) {
	_, addr := startCollector(t)
	opts := Options{Prometheus: true, OTLPEndpoint: addr, OTLPInsecure: true, OTLPInterval: time.Hour, Recorder: RecorderOptions{Classes: classes}}
	agg := newProvider(t, opts)
	opts.Readers = []sdkmetric.Reader{sdkmetric.NewManualReader()}
	sdk := newProvider(t, opts)
	if agg.Recorder.agg == nil || sdk.Recorder.agg != nil {
		t.Fatal("want one aggregating provider and one on SDK instruments")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range 400 {
		obs := randomObservation(rng)
		class, model := []string{"interactive", "batch"}[rng.IntN(2)], "m"+strconv.Itoa(rng.IntN(3))
		agg.Recorder.Record(obs, class, model)
		sdk.Recorder.Record(obs, class, model)
		switch i % 50 {
		case 17:
			for _, p := range []*Provider{agg, sdk} {
				if err := p.ForceFlush(ctx); err != nil {
					t.Fatal(err)
				}
			}
		case 34:
			if diff := cmp.Diff(scrapeText(t, sdk), scrapeText(t, agg)); diff != "" {
				t.Fatalf("after %d requests (-sdk +aggregated):\n%s", i+1, diff)
			}
		}
	}
	if diff := cmp.Diff(scrapeText(t, sdk), scrapeText(t, agg)); diff != "" {
		t.Errorf("(-sdk +aggregated):\n%s", diff)
	}
}

// TestAggregationConcurrent records from several goroutines while the
// Prometheus registry is gathered: under -race this checks the lock
// discipline, and every request must be counted.
func TestAggregationConcurrent(t *testing.T) {
	p := newProvider(t, Options{Prometheus: true, Recorder: RecorderOptions{Classes: classes, MaxModels: 2}})
	const workers, each = 4, 200
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for i := range each {
				obs := randomObservation(rng)
				obs.ErrorKind = 0
				p.Recorder.Record(obs, "batch", "m"+strconv.Itoa(i%3))
				p.Recorder.Preempted("batch", "m0")
			}
		})
	}
	stop := make(chan struct{})
	var scrapes sync.WaitGroup
	scrapes.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
				if _, err := p.Registry().Gather(); err != nil {
					t.Error(err)
					return
				}
			}
		}
	})
	wg.Wait()
	close(stop)
	scrapes.Wait()
	reader := p.Recorder.agg.producer(0)
	sms, err := reader.Produce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, sm := range sms {
		for _, m := range sm.Metrics {
			if m.Name == MetricRequests || m.Name == MetricPreemptions {
				got[m.Name] = counts(m)[""]
			}
		}
	}
	want := map[string]int64{MetricRequests: workers * each, MetricPreemptions: workers * each}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("counts (-want +got):\n%s", diff)
	}
}
