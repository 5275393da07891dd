package schedserve

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/llmesh/llmesh/clock"
	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/config/watch"
	"github.com/llmesh/llmesh/scheduler/server"
)

// Config is what `llmesh scheduler serve` runs: the service's options
// (Mesh and Identities may be left nil when their files are given) and
// the process around it.
type Config struct {
	server.Options
	// ConfigPath, when set, is the mesh config file: Run loads it (when
	// Mesh is nil) and watches it. A changed, valid file is applied live
	// (Service.Reload); an invalid one is logged with the field paths of
	// its problems and the running config stays.
	ConfigPath string
	// IdentitiesPath, when set, is the identities file: Run loads it (when
	// Identities is nil) and reads it again when it changes and at each
	// Hangup (Service.ReplaceIdentities: sessions of an identity removed,
	// or whose token or certificate no longer proves it, are closed). An
	// invalid file is logged with the field paths of its problems and the
	// running identities stay. Token files are read again with it.
	IdentitiesPath string
	// Hangup, when set, reloads the mesh config file and the identities
	// file at each value received (SIGHUP), whether or not they changed.
	Hangup <-chan os.Signal
	// Admin, when non-nil, serves GET /metrics (Prometheus: the service's
	// metrics, the process's CPU and memory, the Go runtime's) and GET
	// /healthz over HTTP; nil serves neither. Options.Registry is then
	// Run's own.
	Admin net.Listener
}

// Run serves the shared scheduler on l until ctx ends, with the watchers,
// hangup reloads and admin server c asks for. All its goroutines end
// before it returns.
func Run(ctx context.Context, l net.Listener, c Config) error {
	lw := &lineWriter{w: c.Log}
	if lw.w == nil {
		lw.w = io.Discard
	}
	c.Log = lw
	var svc *server.Service
	var watcher *watch.Watcher
	if c.ConfigPath != "" {
		w, err := watch.New(c.ConfigPath, watch.Options{
			Clock: c.Clock,
			// svc is set before the watcher's goroutine starts.
			OnChange: func(m *config.Config) { _ = svc.Reload(m) }, // logged by Reload
			OnError: func(err error) {
				fmt.Fprintf(lw, "scheduler: config change rejected; keeping the running config: %v\n", err)
			},
		})
		if err != nil {
			return fmt.Errorf("scheduler server: %w", err)
		}
		watcher = w
		if c.Mesh == nil {
			c.Mesh = w.Config()
		}
	}
	var idf *identitiesFile
	if c.IdentitiesPath != "" {
		var err error
		if idf, err = openIdentities(c.IdentitiesPath, c.Identities, lw); err != nil {
			return fmt.Errorf("scheduler server: %w", err)
		}
		c.Identities = idf.initial
	}
	var reg *prometheus.Registry
	if c.Admin != nil {
		reg = prometheus.NewRegistry()
		// process_cpu_seconds_total and the Go runtime's own: what
		// scheduler bench --service-metrics divides by the admissions.
		reg.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), collectors.NewGoCollector())
		c.Registry = reg
	}
	svc, err := server.NewService(c.Options)
	if err != nil {
		return err
	}
	defer svc.Close()
	idf.serve(svc)

	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		stop()
		wg.Wait()
	}()
	if watcher != nil {
		startWatch(wctx, &wg, func() []string { return []string{watcher.Path()} }, c.Clock, func() { _, _ = watcher.Reload() }, // reported through OnError
			func(err error) { fmt.Fprintf(lw, "scheduler: config file: %v\n", err) })
	}
	if idf != nil {
		startWatch(wctx, &wg, idf.paths, c.Clock, func() { idf.reload(false) },
			func(err error) { fmt.Fprintf(lw, "scheduler: identities file: %v\n", err) })
	}
	if c.Hangup != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hangups(wctx, c.Hangup, lw, watcher, idf)
		}()
	}
	if c.Admin != nil {
		defer serveAdmin(&wg, c.Admin, reg)() // runs before the WaitGroup wait above
	}
	return svc.Serve(ctx, l)
}

// hangups reloads both files at each value of hup until ctx ends.
func hangups(ctx context.Context, hup <-chan os.Signal, lw io.Writer, watcher *watch.Watcher, idf *identitiesFile) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
		}
		fmt.Fprintf(lw, "scheduler: SIGHUP received; still serving, reloading the config file and the identities file\n")
		if watcher != nil {
			_, _ = watcher.Reload() // reported through OnError
		}
		if idf != nil {
			idf.reload(true)
		}
	}
}

// serveAdmin serves /metrics from reg and /healthz on l in a goroutine of
// wg; the returned func closes the server.
func serveAdmin(wg *sync.WaitGroup, l net.Listener, reg *prometheus.Registry) (closeServer func()) {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	hsrv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = hsrv.Serve(l)
	}()
	return func() { hsrv.Close() }
}

// startWatch runs watch.Files for paths in a goroutine of wg until ctx
// ends, and returns once the watch is in place (its first reload) or
// failed to start (reported, SIGHUP still reloads): the service serves
// with its watches running.
func startWatch(ctx context.Context, wg *sync.WaitGroup, paths func() []string, clk clock.Clock, reload func(), report func(error)) {
	watching := make(chan struct{})
	var once sync.Once
	wg.Add(1)
	go func() {
		defer wg.Done()
		err := watch.Files(ctx, paths, 0, clk, func() {
			once.Do(func() { close(watching) })
			reload()
		}, report)
		once.Do(func() { close(watching) })
		if err != nil {
			report(fmt.Errorf("not watched (SIGHUP still reloads it): %w", err))
		}
	}()
	<-watching
}

// lineWriter serialises log lines (one Write each) from Run's goroutines
// and the service's.
type lineWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lineWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
