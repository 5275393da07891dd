package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"

	"github.com/llmesh/llmesh/cmd/llmesh/controlproc"
	"github.com/llmesh/llmesh/cmd/llmesh/internal/flag"
	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/control"
	"github.com/llmesh/llmesh/internal/adminapi"
	"github.com/llmesh/llmesh/internal/tlsfiles"
)

// runControl is `llmesh control`: the xDS control plane for Envoy.
func runControl(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("control", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", "", "mesh config file (YAML), watched for changes (required)")
	xdsAddr := fs.String("xds", "127.0.0.1:18000", "xDS (ADS) gRPC listen address")
	adminAddr := fs.String("admin", "", `admin HTTP listen address (default: the config's admin.address; "off" disables)`)
	libPath := fs.String("library-path", control.DefaultLibraryPath, "path of llmesh-filter.so on the Envoy hosts")
	certFile := fs.String("xds-cert", "", "PEM server certificate: serve xDS over TLS")
	keyFile := fs.String("xds-key", "", "PEM server key (with --xds-cert)")
	clientCA := fs.String("xds-client-ca", "", "PEM CA bundle: require client certificates signed by it (mTLS)")
	insecure := fs.Bool("insecure", false, "allow plaintext xDS on an --xds address beyond loopback (logged as a warning)")
	dump := fs.Bool("dump", false, "print the generated Envoy resources as JSON and exit")
	if err := fs.Parse(args); err != nil {
		return withExitCode(2, nil)
	}
	var errs []error
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected arguments: %q", fs.Args()))
	}
	if *cfgPath == "" {
		errs = append(errs, errors.New("--config: required"))
	}
	if (*certFile == "") != (*keyFile == "") {
		errs = append(errs, errors.New("--xds-cert and --xds-key: give both or neither"))
	}
	if *clientCA != "" && *certFile == "" {
		errs = append(errs, errors.New("--xds-client-ca: needs --xds-cert and --xds-key (mTLS is on top of TLS)"))
	}
	if _, _, err := net.SplitHostPort(*xdsAddr); err != nil && !*dump {
		errs = append(errs, fmt.Errorf("--xds: %q must be host:port", *xdsAddr))
	} else if *certFile == "" && !*dump {
		warn, err := tlsfiles.Plaintext("--xds", *xdsAddr, "--xds-cert and --xds-key (and --xds-client-ca for mTLS)", *insecure)
		if err != nil {
			errs = append(errs, err)
		} else if warn != "" {
			fmt.Fprintln(stderr, warn)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return withExitCode(2, err)
	}
	build := control.BuildOptions{LibraryPath: *libPath}

	if *dump {
		cfg, err := config.LoadFile(*cfgPath)
		if err != nil {
			return fileUsage(err)
		}
		res, err := control.Build(cfg, build)
		if err != nil {
			return err
		}
		b, err := control.Dump(res)
		if err != nil {
			return err
		}
		_, err = stdout.Write(b)
		return err
	}

	opts := control.Options{
		Build:      build,
		Logger:     slog.New(slog.NewTextHandler(stderr, nil)),
		AdminToken: os.Getenv(adminapi.TokenEnv),
	}
	if *certFile != "" {
		tlsCfg, err := tlsfiles.Server(*certFile, *keyFile, *clientCA)
		if err != nil {
			return withExitCode(2, err)
		}
		opts.TLS = tlsCfg
	}
	// SIGHUP: the server already applies every valid change of the file.
	defer logHangups(opts.Logger, "the config file is watched; valid changes already apply as it changes")()
	plane, err := controlproc.New(controlproc.Config{Options: opts, ConfigPath: *cfgPath})
	if err != nil {
		return fileUsage(err)
	}
	srv := plane.Server
	admin := *adminAddr
	if admin == "" {
		admin = srv.Config().AdminAddress
	}
	xl, err := net.Listen("tcp", *xdsAddr)
	if err != nil {
		return fmt.Errorf("--xds: %w", err)
	}
	var al net.Listener
	if admin != "" && admin != "off" {
		if al, err = net.Listen("tcp", admin); err != nil {
			xl.Close()
			return fmt.Errorf("--admin: %w", err)
		}
	}
	fmt.Fprintf(stdout, "llmesh control: xds on %s (tls=%v mtls=%v), version %s\n", xl.Addr(), opts.TLS != nil, *clientCA != "", srv.Version())
	if al != nil {
		fmt.Fprintf(stdout, "llmesh control: admin on http://%s (/version /config /nodes /experiments)\n", al.Addr())
	}
	return plane.Serve(ctx, xl, al)
}
