package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/llmesh/llmesh/cmd/llmesh/internal/flag"
	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/slo"
)

// llmesh slo rules|dashboard: Prometheus rules and the Grafana dashboard
// generated from the mesh config's classes.

// runSLORules is llmesh slo rules.
func runSLORules(_ context.Context, args []string, stdout, stderr io.Writer) error {
	return runSLOGenerate("rules", args, stdout, stderr)
}

// runSLODashboard is llmesh slo dashboard.
func runSLODashboard(_ context.Context, args []string, stdout, stderr io.Writer) error {
	return runSLOGenerate("dashboard", args, stdout, stderr)
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
		return withExitCode(exitUsage, nil)
	}
	var errs []error
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected arguments: %q", fs.Args()))
	}
	if *cfgPath == "" {
		errs = append(errs, errors.New("--config: required"))
	}
	if err := errors.Join(errs...); err != nil {
		return withExitCode(exitUsage, err)
	}
	cfg, err := config.LoadFile(*cfgPath)
	if err != nil {
		return meshError(*cfgPath, err)
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
