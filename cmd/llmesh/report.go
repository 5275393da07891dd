package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"time"

	"github.com/llmesh/llmesh/bench/report"
	"github.com/llmesh/llmesh/cmd/llmesh/internal/flag"
	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/slo/live"
)

// runReportSLO is `llmesh report slo`: the per-class SLO report of a live
// mesh from Prometheus, in the bench reports' shape.
func runReportSLO(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("report slo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	prom := fs.String("prometheus", "", "Prometheus base `URL` scraping the mesh's hosts (required)")
	cfgPath := fs.String("config", "", "mesh config `FILE` with the classes and SLOs (required)")
	window := fs.Duration("window", 24*time.Hour, "report over this long a window ending at --end")
	endFlag := fs.String("end", "", "end of the window, RFC 3339 (default: now)")
	jsonPath := fs.String("json", "", "write the JSON report to `FILE` (- for stdout)")
	mdPath := fs.String("markdown", "", "write the Markdown report to `FILE`")
	htmlPath := fs.String("html", "", "write the HTML report to `FILE`")
	format := fs.String("format", "table", "stdout format: table, json, markdown, html")
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
	if *prom == "" {
		errs = append(errs, errors.New("--prometheus: required"))
	} else if u, err := url.Parse(*prom); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, fmt.Errorf("--prometheus: %q is not an http(s) URL", *prom))
	}
	if *cfgPath == "" {
		errs = append(errs, errors.New("--config: required"))
	}
	if *window < time.Minute {
		errs = append(errs, fmt.Errorf("--window: %v must be at least 1m", *window))
	}
	var end time.Time
	if *endFlag != "" {
		t, err := time.Parse(time.RFC3339, *endFlag)
		if err != nil {
			errs = append(errs, fmt.Errorf("--end: %q is not an RFC 3339 time", *endFlag))
		}
		end = t
	}
	validFormat := false
	for _, f := range report.Formats {
		validFormat = validFormat || f == *format
	}
	if !validFormat {
		errs = append(errs, fmt.Errorf("--format: %q must be one of %v", *format, report.Formats))
	}
	if err := errors.Join(errs...); err != nil {
		return withExitCode(exitUsage, err)
	}
	cfg, err := config.LoadFile(*cfgPath)
	if err != nil {
		return meshError(*cfgPath, err)
	}
	rep, err := live.Build(ctx, &live.Client{Base: *prom}, cfg, live.Options{
		End: end, Window: *window, Prometheus: *prom, Config: *cfgPath,
	})
	if err != nil {
		return err
	}
	if *jsonPath != "-" {
		if err := report.Render(stdout, rep, *format); err != nil {
			return err
		}
	}
	for _, o := range []struct{ path, format string }{{*jsonPath, "json"}, {*mdPath, "markdown"}, {*htmlPath, "html"}} {
		if o.path == "" {
			continue
		}
		if o.path == "-" {
			errs = append(errs, report.Render(stdout, rep, o.format))
			continue
		}
		f, err := os.Create(o.path)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := report.Render(f, rep, o.format); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", o.path, err))
		}
		errs = append(errs, f.Close())
	}
	return errors.Join(errs...)
}
