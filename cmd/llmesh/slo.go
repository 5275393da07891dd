package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/slo"
)

// runSLO is `llmesh slo rules|dashboard`: Prometheus rules and the Grafana
// dashboard generated from the mesh config's classes.
func runSLO(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	usage := "usage: llmesh slo rules|dashboard --config mesh.yaml [--out FILE]"
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage)
		return withExitCode(2, nil)
	}
	switch args[0] {
	case "rules":
		return runSLOGenerate(args[0], args[1:], stdout, stderr)
	case "dashboard":
		return runSLOGenerate(args[0], args[1:], stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprintln(stdout, usage)
		return nil
	}
	fmt.Fprintln(stderr, usage)
	return withExitCode(2, fmt.Errorf("slo: unknown subcommand %q", args[0]))
}

func runSLOGenerate(what string, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("slo "+what, flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", "", "mesh config file whose classes carry the SLOs (required)")
	out := fs.String("out", "", "write to FILE instead of stdout")
	job := fs.String("scheduler-job", "", "Prometheus job scraping the shared scheduler service (default llmesh-scheduler)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return withExitCode(2, nil)
	}
	var errs []error
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected arguments: %q", fs.Args()))
	}
	if *cfgPath == "" {
		errs = append(errs, errors.New("--config: required"))
	}
	if err := errors.Join(errs...); err != nil {
		return withExitCode(2, err)
	}
	cfg, err := config.LoadFile(*cfgPath)
	if err != nil {
		return withExitCode(2, fmt.Errorf("--config: %w", err))
	}
	var b []byte
	switch what {
	case "rules":
		var skipped []slo.Skipped
		b, skipped, err = slo.GenerateRules(cfg, *cfgPath, slo.Options{SchedulerJob: *job})
		for _, s := range skipped {
			fmt.Fprintln(stderr, "note:", s)
		}
	case "dashboard":
		b, err = slo.GenerateDashboard(cfg, *cfgPath)
	}
	if err != nil {
		return err
	}
	if *out == "" {
		_, err = stdout.Write(b)
		return err
	}
	return os.WriteFile(*out, b, 0o644)
}
