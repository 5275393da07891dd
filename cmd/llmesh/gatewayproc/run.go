package gatewayproc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/config/watch"
	"github.com/llmesh/llmesh/exchange"
	"github.com/llmesh/llmesh/exchange/relocate"
	"github.com/llmesh/llmesh/gateway"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/client"
	"github.com/llmesh/llmesh/scheduler/policy"
	"github.com/llmesh/llmesh/scheduler/pools"
	"github.com/llmesh/llmesh/scheduler/server"
	"github.com/llmesh/llmesh/telemetry"
)

// Config is what `llmesh gateway` runs: either a mesh config file
// (watched and reloaded on change) or the quick settings.
type Config struct {
	// ConfigPath is a mesh config file; empty means quick mode (Upstream).
	ConfigPath string
	// Listener picks the mesh config's listener; empty means the first.
	Listener string
	// Listen overrides the listener's address (quick mode: required).
	Listen string
	// Upstream is the OpenAI-compatible engine URL (quick mode).
	Upstream string
	// GRPCUpstream is the gRPC engine address (quick mode, optional).
	GRPCUpstream string
	// Admin overrides the admin listener address; empty means the mesh
	// config's (none in quick mode).
	Admin string
	// Policy and MaxInflight schedule quick-mode requests; with Policy
	// empty and MaxInflight 0 requests are not scheduled.
	Policy      string
	MaxInflight int
	// Drain is how long in-flight requests may finish at shutdown; 0 means
	// 10s.
	Drain time.Duration
	// MaxRequestBytes, StreamIdleTimeout: see gateway.Config.
	MaxRequestBytes   int64
	StreamIdleTimeout time.Duration
	// ServerTiming turns the server-timing header/trailer on in quick mode.
	ServerTiming bool
	// ArmDraw picks experiment arms by weight (see gateway.WithArmDraw); nil means
	// math/rand/v2.
	ArmDraw func() float64
	// Logger; nil means slog.Default().
	Logger *slog.Logger
	// Ready, when non-nil, is called with the bound data and admin
	// addresses (admin nil when there is none) once both listen.
	Ready func(data, admin net.Addr)
	// AdminToken, when not empty, is required of admin requests that
	// change state (gateway.WithAdminToken).
	AdminToken string
	// Hangup, when not nil, asks for a reload of the config file each
	// time it delivers (SIGHUP in `llmesh gateway`): the same reload as a
	// file change, logged; in quick mode there is nothing to reload and
	// that is logged. Nil: only file changes reload.
	Hangup <-chan os.Signal
}

// Run builds everything a Config describes, serves until ctx ends,
// drains and returns.
func Run(ctx context.Context, rc Config) error {
	log := rc.Logger
	if log == nil {
		log = slog.Default()
	}
	if rc.Drain <= 0 {
		rc.Drain = 10 * time.Second
	}
	h, err := buildHost(ctx, rc, log)
	if err != nil {
		return err
	}
	defer h.close()
	if h.mesh != nil {
		// Capacity watchers run until ctx ends or h.close.
		if err := h.mesh.Start(ctx); err != nil {
			return err
		}
	}

	ln, err := net.Listen("tcp", h.listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", h.listen, err)
	}
	var aln net.Listener
	if h.admin != "" {
		if aln, err = net.Listen("tcp", h.admin); err != nil {
			ln.Close()
			return fmt.Errorf("admin listen %s: %w", h.admin, err)
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, 4)
	goRun := func(f func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(); err != nil && !errors.Is(err, context.Canceled) {
				errc <- err
				cancel()
			}
		}()
	}
	goRun(func() error { return h.gw.Serve(ctx, ln, rc.Drain) })
	var adminAddr net.Addr
	if aln != nil {
		adminAddr = aln.Addr()
		var register func(*http.ServeMux)
		if h.exps != nil {
			register = h.exps.Register
		}
		goRun(func() error { return h.gw.ServeAdmin(ctx, aln, h.tele.PrometheusHandler(), register) })
	}
	if h.watcher != nil {
		goRun(func() error { return h.watcher.Run(ctx) })
	}
	if rc.Hangup != nil {
		goRun(func() error { return h.hangups(ctx, rc.Hangup, log) })
	}
	admin := "none"
	if adminAddr != nil {
		admin = adminAddr.String() // the bound address, not a ":0" request
	}
	log.Info("gateway listening", "addr", ln.Addr().String(), "admin", admin, "scheduled", h.sched != nil)
	if rc.Ready != nil {
		rc.Ready(ln.Addr(), adminAddr)
	}
	<-ctx.Done()
	wg.Wait()
	close(errc)
	var errs []error
	for err := range errc {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// hangups reloads the config file on each delivery of ch until ctx ends.
// Watcher.Reload is serialised with the watcher's own reloads; a change
// goes through OnChange, as a file event's does.
func (h *host) hangups(ctx context.Context, ch <-chan os.Signal, log *slog.Logger) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ch:
		}
		if h.watcher == nil {
			log.Info("SIGHUP received; no config file to reload (quick mode), still serving")
			continue
		}
		changed, err := h.watcher.Reload()
		switch {
		case err != nil:
			log.Error("SIGHUP: config reload failed; keeping the running config", "path", h.watcher.Path(), "err", err)
		case changed:
			log.Info("SIGHUP: config file reloaded", "path", h.watcher.Path())
		default:
			log.Info("SIGHUP: config file unchanged", "path", h.watcher.Path())
		}
	}
}

// host is what Run built.
type host struct {
	gw      *gateway.Gateway
	sched   *pools.Set           // nil when requests are not scheduled
	mesh    *pools.MeshSet       // mesh mode: sched kept in step with the file
	exps    *gateway.Experiments // mesh mode
	client  *client.Client
	tele    *telemetry.Provider
	watcher *watch.Watcher
	listen  string
	admin   string
}

func (h *host) close() {
	if h.client != nil {
		_ = h.client.Close()
	}
	if h.mesh != nil {
		_ = h.mesh.Close() // stops the capacity watchers too
	} else if h.sched != nil {
		_ = h.sched.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = h.tele.Shutdown(ctx)
	h.gw.Close()
}

func buildHost(ctx context.Context, rc Config, log *slog.Logger) (*host, error) {
	h := &host{listen: rc.Listen, admin: rc.Admin}
	var (
		gcfg    gateway.Config
		scfg    *scheduler.Config
		topts   = telemetry.Options{Prometheus: true}
		opts    []gateway.Option
		classes []exchange.Class
		mesh    *config.Config
	)
	if rc.ConfigPath != "" {
		// OnChange runs on the watcher's goroutine, which Run starts after
		// h.gw and h.exps are set.
		w, err := watch.New(rc.ConfigPath, watch.Options{
			OnChange: func(c *config.Config) {
				if err := h.exps.FileChanged(c); err != nil {
					log.Error("config reload rejected; keeping the running config", "err", err)
					return
				}
				log.Info("config reloaded", "path", rc.ConfigPath)
			},
			OnError: func(err error) {
				log.Error("config change invalid; keeping the last good config", "err", err)
			},
		})
		if err != nil {
			return nil, err
		}
		mesh = w.Config()
		if gcfg, err = gateway.ConfigFromMesh(mesh, rc.Listener); err != nil {
			return nil, err
		}
		sc, err := pools.Config(mesh)
		if err != nil {
			return nil, err
		}
		scfg = &sc
		h.exps = gateway.NewExperiments(mesh, func(c *config.Config, sched bool) error { return h.applyMesh(c, rc.Listener, sched, log) }, log)
		cls, err := exchange.NewClassifierFromConfig(mesh)
		if err != nil {
			return nil, err
		}
		opts = append(opts, gateway.WithClassifier(cls))
		for _, c := range mesh.Classes {
			classes = append(classes, exchange.Class{Name: c.Name, Priority: c.Priority, TTFT: c.TTFT, TPOT: c.TPOT, Preemptible: c.Preemptible})
		}
		topts = telemetry.OptionsFromConfig(mesh.Telemetry)
		if h.listen == "" {
			l := mesh.Listeners[0]
			if rc.Listener != "" {
				l = mesh.Listener(rc.Listener)
			}
			h.listen = l.Address
		}
		if h.admin == "" {
			h.admin = mesh.AdminAddress
		}
		if mesh.Relocation.Enabled() {
			rel, err := relocate.FromConfig(mesh.Relocation)
			if err != nil {
				return nil, fmt.Errorf("relocation: %w", err)
			}
			// h.tele is set before any request.
			opts = append(opts, gateway.WithRelocation(rel, func(kind string, n int) { h.tele.Recorder.Relocated(kind, int64(n)) }))
		}
		h.watcher = w
	} else {
		var errs []error
		if rc.Upstream == "" && rc.GRPCUpstream == "" {
			errs = append(errs, errors.New("--upstream: required without --config"))
		}
		if rc.Listen == "" {
			errs = append(errs, errors.New("--listen: required without --config"))
		}
		if rc.MaxInflight < 0 {
			errs = append(errs, fmt.Errorf("--max-inflight: %d must not be negative", rc.MaxInflight))
		}
		if rc.Upstream != "" {
			gcfg.Pools = append(gcfg.Pools, gateway.Pool{Name: "default", Protocol: gateway.OpenAI, Upstream: rc.Upstream})
		}
		if rc.GRPCUpstream != "" {
			gcfg.Pools = append(gcfg.Pools, gateway.Pool{Name: "grpc", Protocol: gateway.GRPC, Upstream: rc.GRPCUpstream})
		}
		gcfg.ServerTiming = rc.ServerTiming
		if rc.Policy != "" || rc.MaxInflight > 0 {
			name := rc.Policy
			if name == "" {
				name = "fifo"
			}
			pol, err := policy.Lookup(name)
			if err != nil {
				errs = append(errs, fmt.Errorf("--policy: %w", err))
			}
			n := rc.MaxInflight
			if n == 0 {
				n = 64
			}
			sc := scheduler.Config{Classes: []scheduler.ClassConfig{{Name: "default"}}}
			for _, p := range gcfg.Pools {
				sc.Pools = append(sc.Pools, scheduler.PoolConfig{Name: p.Name, MaxInflight: n, Policy: pol})
			}
			scfg = &sc
		}
		if err := errors.Join(errs...); err != nil {
			return nil, err
		}
	}
	gcfg.MaxRequestBytes = rc.MaxRequestBytes
	gcfg.StreamIdleTimeout = rc.StreamIdleTimeout
	topts.Prometheus = true
	topts.Recorder = telemetry.RecorderOptions{Classes: classes}
	tele, err := telemetry.New(ctx, topts)
	if err != nil {
		return nil, err
	}
	h.tele = tele
	opts = append(opts, gateway.WithRecorder(telemetry.HostRecorder{R: tele.Recorder}), gateway.WithLogger(log), gateway.WithArmDraw(rc.ArmDraw),
		gateway.WithAdminToken(rc.AdminToken))
	if mesh != nil {
		// Arms may come with a reload: record per arm from the start.
		arms, err := telemetry.NewArmRecorder(tele.MeterProvider, topts.Recorder)
		if err != nil {
			_ = tele.Shutdown(ctx)
			return nil, err
		}
		opts = append(opts, gateway.WithRecorder(gateway.RecorderFunc(func(rec gateway.Record) {
			// h.gw is set before the first request.
			if exp, arm := h.gw.Arm(rec.Pool); arm != "" && !rec.Passthrough {
				arms.Record(rec.Observation, rec.Class, exp, arm)
			}
		})))
	}
	if scfg != nil {
		var (
			s   *pools.Set
			err error
		)
		if mesh != nil {
			h.mesh, err = pools.NewMesh(mesh, nil)
			if err == nil {
				s = h.mesh.Set
			}
		} else {
			s, err = pools.New(*scfg, nil)
		}
		if err != nil {
			_ = tele.Shutdown(ctx)
			return nil, fmt.Errorf("scheduler: %w", err)
		}
		h.sched = s
		if reg := tele.Registry(); reg != nil && (mesh == nil || mesh.SchedulerService == nil) {
			// The pools' limit, in-flight and queue gauges next to the
			// request metrics (docs/slo.md reads them); with a shared
			// service, that service exports them.
			reg.MustRegister(server.NewCollector(s.Stats))
		}
		var adm scheduler.Admitter = s
		if mesh != nil && mesh.SchedulerService != nil {
			// The shared service orders requests across gateways; the
			// in-process scheduler takes over while it is unreachable when
			// the config says fail_open.
			tlsCfg, err := mesh.SchedulerService.ServiceTLS()
			var token string
			if err == nil {
				token, err = mesh.SchedulerService.ServiceToken()
			}
			if err != nil {
				_ = s.Close()
				_ = tele.Shutdown(ctx)
				return nil, err
			}
			c, err := client.New(mesh.SchedulerService.Address, client.Options{FailOpen: mesh.SchedulerService.FailOpen, Fallback: s,
				Timeout: mesh.SchedulerService.Timeout, Transport: mesh.SchedulerService.Transport,
				ReportDelay: client.ReportDelayOf(mesh.SchedulerService.ReportDelay), TLS: tlsCfg, Token: token})
			if err != nil {
				_ = s.Close()
				_ = tele.Shutdown(ctx)
				return nil, fmt.Errorf("scheduler_service: %w", err)
			}
			h.client = c
			adm = c
		}
		opts = append(opts, gateway.WithAdmitter(adm))
	}
	g, err := gateway.New(gcfg, opts...)
	if err != nil {
		if h.client != nil {
			_ = h.client.Close()
		}
		if h.sched != nil {
			_ = h.sched.Close()
		}
		_ = tele.Shutdown(ctx)
		return nil, err
	}
	h.gw = g
	return h, nil
}

// applyMesh makes c (a file change or an arm switch) the running config:
// the gateway part is checked first, then the scheduler part applied (when
// sched: arm switches leave it alone), then the routes, so that new arm
// pools are scheduled before requests reach them.
func (h *host) applyMesh(c *config.Config, listener string, sched bool, log *slog.Logger) error {
	if err := gateway.CheckMesh(c, listener); err != nil {
		return err
	}
	if sched && h.mesh != nil {
		built, err := h.mesh.Apply(c)
		if err != nil {
			return fmt.Errorf("scheduler: %w", err)
		}
		for _, name := range built {
			log.Info("scheduler pool (re)built", "pool", name)
		}
	}
	return h.gw.ApplyMesh(c, listener)
}
