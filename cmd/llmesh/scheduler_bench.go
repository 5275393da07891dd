package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"time"

	"github.com/llmesh/llmesh/cmd/llmesh/internal/flag"
	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/client"
	"github.com/llmesh/llmesh/scheduler/loadgen"
)

// runSchedulerBench is `llmesh scheduler bench`: load on a shared
// scheduler service from several client proxies, each with its own
// connection (scheduler/loadgen).
func runSchedulerBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("scheduler bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	target := fs.String("target", "", "the service's gRPC address (host:port), as given to scheduler serve --listen")
	cfgPath := fs.String("config", "", "mesh config whose pools and classes the requests use (the service's own, normally)")
	proxies := fs.Int("proxies", 8, "client proxies, each its own gRPC connection")
	rate := fs.Float64("rate", 0, "open loop: admissions per second over all proxies (Poisson or uniform arrivals)")
	inflight := fs.Int("inflight", 0, "closed loop: requests in flight over all proxies (when --rate is 0)")
	arrivals := fs.String("arrivals", "poisson", "open-loop arrivals: poisson or uniform")
	duration := fs.Duration("duration", 10*time.Second, "measured duration")
	warmup := fs.Duration("warmup", time.Second, "load before the measured duration, not measured")
	firstToken := fs.Duration("first-token", 0, "time from admission to the first-token progress report")
	hold := fs.Duration("hold", 0, "time from the first token to release")
	affinity := fs.Int("affinity-keys", 0, "distinct affinity keys requests carry (0: none)")
	protocol := fs.String("protocol", "session", "session (one multiplexed stream per proxy) or stream (one stream per admission, the older protocol)")
	transport := fs.String("transport", client.TransportAuto, "session transport: auto (framed, gRPC with a service that lacks it), framed (plain TCP) or grpc; as scheduler_service.transport")
	seed := fs.Uint64("seed", 1, "seed of the arrivals and the request mix")
	jsonOut := fs.String("json", "", "write the report as JSON to `FILE` (- for stdout)")
	traceOut := fs.String("trace", "", "write a Go execution trace of the client to `FILE` for the run (go tool trace)")
	reportDelay := fs.Duration("report-delay", client.DefaultReportDelay, "how long the proxies hold a lease's progress and release for their next message (mesh scheduler_service.report_delay); 0 sends each at once")
	serviceMetrics := fs.String("service-metrics", "", "the service's Prometheus `URL` (scheduler serve --admin ADDR: http://ADDR/metrics): report its CPU per admission over the measured window")
	if err := fs.Parse(args); err != nil {
		return withExitCode(exitUsage, nil)
	}
	var errs []error
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected arguments: %q", fs.Args()))
	}
	if _, _, err := net.SplitHostPort(*target); err != nil {
		errs = append(errs, fmt.Errorf("--target: %q: %w", *target, err))
	}
	if *cfgPath == "" {
		errs = append(errs, errors.New("--config: required (the pools and classes to admit to)"))
	}
	if *proxies < 1 {
		errs = append(errs, fmt.Errorf("--proxies: %d must be at least 1", *proxies))
	}
	if *protocol != "session" && *protocol != "stream" {
		errs = append(errs, fmt.Errorf("--protocol: %q must be session or stream", *protocol))
	}
	switch {
	case *transport != client.TransportAuto && *transport != client.TransportGRPC && *transport != client.TransportFramed:
		errs = append(errs, fmt.Errorf("--transport: %q must be %s, %s or %s", *transport, client.TransportAuto, client.TransportGRPC, client.TransportFramed))
	case *transport == client.TransportFramed && *protocol == "stream":
		errs = append(errs, fmt.Errorf("--transport: %s carries sessions only (--protocol session)", client.TransportFramed))
	}
	if *affinity < 0 {
		errs = append(errs, fmt.Errorf("--affinity-keys: %d must not be negative", *affinity))
	}
	if *reportDelay < 0 {
		errs = append(errs, fmt.Errorf("--report-delay: %v must not be negative", *reportDelay))
	}
	if *serviceMetrics != "" {
		if u, err := url.Parse(*serviceMetrics); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("--service-metrics: %q must be an http:// or https:// URL", *serviceMetrics))
		}
	}
	var mix loadgen.Mix
	if *cfgPath != "" {
		mesh, err := config.LoadFile(*cfgPath)
		if err == nil {
			mix, err = loadgen.MixFromMesh(mesh)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("--config %s: %w", *cfgPath, err))
		}
		mix.AffinityKeys = *affinity
	}
	o := loadgen.Options{Rate: *rate, Inflight: *inflight, Arrivals: *arrivals, Warmup: *warmup, Duration: *duration,
		FirstToken: *firstToken, Hold: *hold, Mix: mix, Seed: *seed}
	if *serviceMetrics != "" {
		o.ServiceCPU = loadgen.PrometheusCPU(*serviceMetrics, nil)
	}
	if len(errs) == 0 {
		// Clients connect lazily: making them first lets Validate see the
		// proxies with the rest of the flags.
		for range *proxies {
			c, err := client.New(*target, client.Options{StreamPerAdmission: *protocol == "stream", Transport: *transport,
				ReportDelay: client.ReportDelayOf(*reportDelay)})
			if err != nil {
				return err
			}
			defer c.Close()
			o.Proxies = append(o.Proxies, c)
		}
		if err := o.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return withExitCode(exitUsage, err)
	}
	if *traceOut != "" {
		stop, err := startTrace(*traceOut)
		if err != nil {
			return err
		}
		defer stop()
	}
	rep, err := loadgen.Run(ctx, o)
	if err != nil {
		return err
	}
	rep.Wire = wireOf(*protocol, o.Proxies, *reportDelay)
	if err := rep.WriteText(stdout); err != nil {
		return err
	}
	if *jsonOut != "" {
		if err := writeFile(*jsonOut, stdout, func(w io.Writer) error { return writeJSON(w, rep) }); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return fmt.Errorf("scheduler bench: interrupted after %.1f s of %v measured (the report covers them)", rep.DurationS, *duration)
	}
	if rep.Admissions == 0 {
		return fmt.Errorf("scheduler bench: no request was admitted (%d rejected, %d errors)", rep.Rejected, rep.Errors)
	}
	return nil
}

// wireOf describes how the proxies talked to the service: the protocol,
// the transport their sessions used (what auto chose) and the report
// delay.
func wireOf(protocol string, proxies []scheduler.Admitter, delay time.Duration) string {
	if protocol == "stream" {
		return "a gRPC Admit stream per admission"
	}
	tr := ""
	for _, p := range proxies {
		if c, ok := p.(*client.Client); ok && tr == "" {
			tr = c.SessionTransport()
		}
	}
	if tr == "" {
		tr = "none open at the end"
	}
	return fmt.Sprintf("session, transport %s, report delay %v", tr, delay)
}
