package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime/pprof"
	"runtime/trace"

	"github.com/llmesh/llmesh/cmd/llmesh/internal/flag"
	"github.com/llmesh/llmesh/cmd/llmesh/schedserve"
	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/internal/tlsfiles"
	"github.com/llmesh/llmesh/scheduler/server"
	"github.com/llmesh/llmesh/scheduler/server/identity"
)

// runScheduler is `llmesh scheduler serve`: the shared scheduler service.
func runScheduler(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "serve" {
		fmt.Fprintln(stderr, "usage: llmesh scheduler serve --listen ADDR --config mesh.yaml [--tls-cert F --tls-key F [--client-ca F] | --insecure] [--identities F] [--admin ADDR] [--cpuprofile FILE] [--trace FILE]")
		return withExitCode(2, nil)
	}
	fs := flag.NewFlagSet("scheduler serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:9090", "gRPC listen address (host:port)")
	cfgPath := fs.String("config", "", "mesh config file (pools, classes, scheduler settings; watched, valid changes apply live)")
	admin := fs.String("admin", "", "optional HTTP address for /metrics (Prometheus) and /healthz")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the service to `FILE` until it stops (go tool pprof)")
	traceOut := fs.String("trace", "", "write a Go execution trace of the service to `FILE` until it stops (go tool trace)")
	certFile := fs.String("tls-cert", "", "serve over TLS with this certificate `FILE` (PEM); both transports")
	keyFile := fs.String("tls-key", "", "the TLS certificate's key `FILE` (PEM)")
	clientCA := fs.String("client-ca", "", "require client certificates signed by this CA bundle `FILE` (mTLS; needs --tls-cert)")
	maxSessions := fs.Int("max-sessions", server.DefaultMaxSessions, "open sessions at most (one per connected proxy)")
	maxLeases := fs.Int("max-leases-per-session", server.DefaultMaxLeasesPerSession, "leases (waiting or admitted) one session may hold")
	preemptGrace := fs.Duration("preempt-grace", server.DefaultPreemptGrace, "a preempted lease still open this long after its Preempt is ended by the service")
	identitiesFile := fs.String("identities", "", "identities `FILE` (YAML): who may connect (certificate CN/URI SAN or bearer token) and each one's classes, pools and limits; watched and read again on SIGHUP; without it every client is trusted")
	insecure := fs.Bool("insecure", false, "allow plaintext on a --listen address beyond loopback (logged as a warning)")
	if err := fs.Parse(args[1:]); err != nil {
		return withExitCode(2, nil)
	}
	var errs []error
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected arguments: %q", fs.Args()))
	}
	if *cfgPath == "" {
		errs = append(errs, errors.New("--config: required"))
	}
	if _, _, err := net.SplitHostPort(*listen); err != nil {
		errs = append(errs, fmt.Errorf("--listen: %q: %w", *listen, err))
	}
	if *admin != "" {
		if _, _, err := net.SplitHostPort(*admin); err != nil {
			errs = append(errs, fmt.Errorf("--admin: %q: %w", *admin, err))
		}
	}
	if *maxSessions < 1 {
		errs = append(errs, fmt.Errorf("--max-sessions: %d must be at least 1", *maxSessions))
	}
	if *maxLeases < 1 {
		errs = append(errs, fmt.Errorf("--max-leases-per-session: %d must be at least 1", *maxLeases))
	}
	if *preemptGrace <= 0 {
		errs = append(errs, fmt.Errorf("--preempt-grace: %v must be positive", *preemptGrace))
	}
	var tlsCfg *tls.Config
	if *certFile != "" || *keyFile != "" || *clientCA != "" {
		var err error
		if tlsCfg, err = tlsfiles.Server(*certFile, *keyFile, *clientCA); err != nil {
			errs = append(errs, fmt.Errorf("--tls-cert, --tls-key, --client-ca: %w", err))
		}
	}
	var ids *identity.Set
	if *identitiesFile != "" {
		var err error
		if ids, err = identity.Load(*identitiesFile); err != nil {
			errs = append(errs, fmt.Errorf("--identities: %w", err))
		}
	}
	if tlsCfg == nil && len(errs) == 0 {
		warn, err := tlsfiles.Plaintext("--listen", *listen, "--tls-cert and --tls-key (and --client-ca for mTLS)", *insecure)
		if err != nil {
			errs = append(errs, err)
		} else if warn != "" {
			fmt.Fprintln(stderr, warn)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return withExitCode(2, err)
	}
	mesh, err := config.LoadFile(*cfgPath)
	if err != nil {
		return meshError(*cfgPath, err)
	}
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			l.Close()
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			l.Close()
			return err
		}
		defer func() {
			pprof.StopCPUProfile()
			f.Close()
		}()
	}
	if *traceOut != "" {
		stop, err := startTrace(*traceOut)
		if err != nil {
			l.Close()
			return err
		}
		defer stop()
	}
	var adminL net.Listener
	if *admin != "" {
		if adminL, err = net.Listen("tcp", *admin); err != nil {
			l.Close()
			return err
		}
		defer adminL.Close()
		fmt.Fprintf(stdout, "scheduler admin on http://%s/metrics\n", adminL.Addr())
	}
	// SIGHUP reloads the config and identities files now (both are also
	// watched: valid changes apply as they change).
	hup, stopHangups := hangups()
	defer stopHangups()
	return schedserve.Run(ctx, l, schedserve.Config{
		Options: server.Options{
			Mesh:       mesh,
			Log:        stderr,
			TLS:        tlsCfg,
			Identities: ids,
			Limits:     server.Limits{MaxSessions: *maxSessions, MaxLeasesPerSession: *maxLeases, PreemptGrace: *preemptGrace},
			Ready: func(a net.Addr) {
				fmt.Fprintf(stdout, "scheduler service listening on %s\n", a)
			},
		},
		ConfigPath:     *cfgPath, // watched: valid changes apply live
		Admin:          adminL,
		IdentitiesPath: *identitiesFile, // watched, and read again on SIGHUP
		Hangup:         hup,
	})
}

// startTrace writes a Go execution trace (runtime/trace) to path until
// the returned stop is called: the tool that shows where a request waits
// for a processor between goroutines (go tool trace, -pprof=sched).
func startTrace(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := trace.Start(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		trace.Stop()
		f.Close()
	}, nil
}
