// Package demo is `llmesh demo`: the whole product on one machine. It starts
// the simulated engine, the embedded gateway and the xDS control plane on
// loopback, runs the standard mixed-priority workload through the gateway
// under fifo and under preemptive scheduling as an interleaved A/B, and
// writes the SLO reports and the comparison.
//
// Every component runs in this process on ports the kernel picks, so the demo
// needs no free fixed port and leaves nothing running: each arm's run gets a
// fresh engine and gateway that stop when the run ends, and everything else
// stops when Run returns or its context ends.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/llmesh/llmesh/bench/ab"
	"github.com/llmesh/llmesh/bench/harness"
	"github.com/llmesh/llmesh/bench/result"
	"github.com/llmesh/llmesh/bench/simulate"
	"github.com/llmesh/llmesh/bench/workload"
	"github.com/llmesh/llmesh/bench/workloads"
	"github.com/llmesh/llmesh/cmd/llmesh/controlproc"
	"github.com/llmesh/llmesh/cmd/llmesh/demo/stack"
	"github.com/llmesh/llmesh/control"
	"github.com/llmesh/llmesh/sim/server"
)

// DefaultLoad is the demo's offered load relative to saturation: a moderate
// overload, the situation priority scheduling exists for. At load 1.0 a
// queue needs many minutes to build up (virtual-time runs of 30 minutes show
// it), longer than a demo lasts; at 1.3 it builds within seconds.
const DefaultLoad = 1.3

// Options configure Run. Zero fields take the defaults named.
type Options struct {
	// OutDir receives the reports; default ./llmesh-demo-out.
	OutDir string
	// Quick runs one short A/B pair (about 45 s) instead of the full demo.
	Quick bool
	// Workload replaces the standard mixed-priority workload.
	Workload *workload.Workload
	// Repeats and Duration override the number of A/B pairs and the
	// measured length of each run.
	Repeats  int
	Duration time.Duration
	// A and B are the policies compared; default fifo and preemptive.
	A, B string
	// MaxInflight caps the gateway's admissions to the engine (the limit
	// learned from the engine's /metrics stays below it); default 64.
	MaxInflight int
	// Bounds are the admission bounds of both arms' pools; zero: off.
	Bounds Bounds
	// MaxLag, when positive, is an absolute budget for each run's
	// schedule-lag p99 (the workload's max_schedule_lag_p99), replacing the
	// relative one; 0 keeps the workload's.
	MaxLag time.Duration
	// Retries is how many times a pair with an invalid run is run again
	// (ab.Options.Retries); 0: never. A negative value means 0.
	Retries int
	// Load sets the arrival rate to Load × the workload's saturation rate
	// on the simulated engine, measured in virtual time before the runs
	// (bench/simulate.Saturation); default DefaultLoad. Negative keeps the
	// workload's own rate.
	Load float64
	// Stdout gets the tables and the verdict; Stderr progress and logs.
	// nil discards.
	Stdout, Stderr io.Writer
	// Gateway runs each arm's gateway (cmd/llmesh passes the process
	// wiring of `llmesh gateway`); required.
	Gateway stack.RunGateway
}

// Result is what a demo produced.
type Result struct {
	AB    *ab.Result
	Files []string
	Wall  time.Duration
	// Engine is how each run's simulated engine kept to its timing model,
	// by arm policy, in run order.
	Engine map[string][]EngineTiming
}

func (o *Options) defaults() error {
	if o.Gateway == nil {
		return errors.New("demo: no Gateway to run")
	}
	if o.OutDir == "" {
		o.OutDir = "llmesh-demo-out"
	}
	if o.A == "" {
		o.A = "fifo"
	}
	if o.B == "" {
		o.B = "preemptive"
	}
	if o.MaxInflight == 0 {
		o.MaxInflight = 64
	}
	if o.Load == 0 {
		o.Load = DefaultLoad
	}
	if o.Stdout == nil {
		o.Stdout = io.Discard
	}
	if o.Stderr == nil {
		o.Stderr = io.Discard
	}
	if o.Workload == nil {
		w, err := workloads.LoadStandard()
		if err != nil {
			return err
		}
		o.Workload = w
	}
	if o.Repeats == 0 {
		o.Repeats = 3
		if o.Quick {
			o.Repeats = 1
		}
	}
	if o.Duration == 0 {
		o.Duration = 20 * time.Second
		if o.Quick {
			o.Duration = 10 * time.Second
		}
	}
	return nil
}

// Run runs the demo.
func Run(ctx context.Context, o Options) (*Result, error) {
	start := time.Now()
	if err := o.defaults(); err != nil {
		return nil, err
	}
	// Every input is checked before anything is written, so a mistyped
	// policy leaves the previous outputs as they were.
	var errs []error
	for _, arm := range []struct{ name, policy string }{{"A", o.A}, {"B", o.B}} {
		if err := o.CheckArm(arm.policy); err != nil {
			errs = append(errs, fmt.Errorf("arm %s: %w", arm.name, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.OutDir, 0o755); err != nil {
		return nil, fmt.Errorf("output directory %s: %w (choose another with --out)", o.OutDir, err)
	}
	probe := filepath.Join(o.OutDir, ".write-test")
	if err := os.WriteFile(probe, nil, 0o644); err != nil {
		return nil, fmt.Errorf("output directory %s is not writable: %w (choose another with --out)", o.OutDir, err)
	}
	os.Remove(probe)

	w := o.shaped()
	saturation := 0.0
	if o.Load > 0 && !w.Closed() {
		sat, err := simulate.Saturation(w, simulate.Options{MaxInflight: o.MaxInflight})
		if err != nil {
			return nil, fmt.Errorf("measuring the workload's saturation rate: %w", err)
		}
		saturation = sat
		w = w.ScaleRate(o.Load * sat / w.Spec.Arrival.Rate)
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	// The control plane serves the B arm's mesh config to Envoy nodes, so
	// the same config that drives the embedded gateway is also what an
	// Envoy deployment would receive.
	cp, err := startControl(ctx, o, w, logger)
	if err != nil {
		return nil, err
	}
	defer cp.stop()
	fmt.Fprintf(o.Stdout, "llmesh demo: workload %q, %d class(es), %s per run, %d A/B pair(s): %s vs %s\n",
		w.Spec.Name, len(w.Classes), o.Duration, o.Repeats, o.A, o.B)
	if saturation > 0 {
		fmt.Fprintf(o.Stdout, "saturation of the simulated %s engine for this mix: %.2f req/s (virtual time); running at load %.2f = %.2f req/s\n",
			w.Spec.Profile, saturation, o.Load, w.Spec.Arrival.Rate)
	} else {
		fmt.Fprintf(o.Stdout, "arrival rate: the workload's own, %.2f req/s\n", w.Spec.Arrival.Rate)
	}
	fmt.Fprintf(o.Stdout, "xDS control plane on %s (admin http://%s, snapshot version %s)\n", cp.xds, cp.admin, cp.srv.Version())

	var mu sync.Mutex
	// Each run's records go to a temporary file, renamed to its final name
	// only when the whole A/B succeeded (see writeOutputs).
	var pending []pendingFile
	runN := map[string]int{}
	engine := map[string][]EngineTiming{}
	arm := func(policy string) ab.Target {
		return ab.Func{Label: policy, Start: func(ctx context.Context) (string, func(), error) {
			url, pace, stop, err := startStack(ctx, o, w, policy, logger)
			if err != nil {
				return "", nil, err
			}
			return url, func() {
				stop()
				mu.Lock()
				engine[policy] = append(engine[policy], engineTiming(pace()))
				mu.Unlock()
			}, nil
		}}
	}
	res, err := ab.Compare(ctx, ab.Options{
		Workload: w,
		Primary:  w.Spec.Primary(), // the workload's declared primary decides, as in bench ab
		A:        arm(o.A),
		B:        arm(o.B),
		Repeats:  o.Repeats,
		Retries:  max(o.Retries, 0),
		Progress: o.Stderr,
		Log:      o.Stderr,
		Run: func(ctx context.Context, ho harness.Options) (*result.Report, []result.Record, error) {
			mu.Lock()
			runN[ho.Label]++
			name := fmt.Sprintf("requests-%s-%d.jsonl", ho.Label, runN[ho.Label])
			mu.Unlock()
			f, err := os.CreateTemp(o.OutDir, "."+name+".*")
			if err != nil {
				return nil, nil, err
			}
			defer f.Close()
			mu.Lock()
			pending = append(pending, pendingFile{tmp: f.Name(), path: filepath.Join(o.OutDir, name)})
			mu.Unlock()
			ho.JSONL = f
			ho.Policy = ho.Label
			return harness.Run(ctx, ho)
		},
	})
	if res != nil && len(res.Primary) > 0 {
		res.PrimaryFrom = "workload " + w.Spec.Name
	}
	if err != nil {
		// A failed A/B replaces none of the previous outputs.
		discard(pending)
		if res == nil {
			return nil, err
		}
		out := &Result{AB: res, Wall: time.Since(start), Engine: engine}
		fmt.Fprintf(o.Stdout, "\nthe A/B failed; the outputs in %s were left as they were\n", o.OutDir)
		printSummary(o.Stdout, o, res, engine)
		return out, err
	}
	files, werr := writeOutputs(o, res, pending)
	out := &Result{AB: res, Files: files, Wall: time.Since(start), Engine: engine}
	if werr == nil {
		fmt.Fprintf(o.Stdout, "\nwrote %s (%d files, report.html first) in %s\n", o.OutDir, len(files), out.Wall.Round(time.Second))
	}
	printSummary(o.Stdout, o, res, engine) // ends with the verdict
	return out, werr
}

// CheckArm reports whether policy can run as an arm with these options:
// the arm's mesh config (policy, admission bounds, the workload's classes)
// must load. It starts nothing and writes nothing.
func (o Options) CheckArm(policy string) error {
	if err := o.defaults(); err != nil {
		return err
	}
	_, err := meshYAML(o.shaped(), "127.0.0.1:8000", policy, o.MaxInflight, o.Bounds)
	return err
}

// shaped returns the workload with the demo's run length.
func (o *Options) shaped() *workload.Workload {
	w := *o.Workload
	w.Spec.Duration = workload.Duration(o.Duration)
	w.Spec.Requests = 0
	if o.MaxLag > 0 {
		w.Spec.MaxScheduleLagP99 = workload.Duration(o.MaxLag)
	}
	if o.Quick && time.Duration(w.Spec.Warmup.Duration) > 2*time.Second {
		w.Spec.Warmup.Duration = workload.Duration(2 * time.Second)
	}
	return &w
}

// startStack brings up one arm: a fresh simulated engine and a gateway
// scheduling with policy in front of it. It returns the gateway's URL, the
// engine's pace so far, and stop, which shuts both down.
func startStack(ctx context.Context, o Options, w *workload.Workload, policy string, logger *slog.Logger) (string, func() server.Pace, func(), error) {
	st, err := stack.Start(ctx, stack.Config{
		Sim: server.Config{Profile: w.Spec.Profile, ServedModelName: w.Spec.Model, Seed: uint64(w.Spec.Seed), Logger: logger},
		Mesh: func(simHTTP, _ string) ([]byte, error) {
			return meshYAML(w, simHTTP, policy, o.MaxInflight, o.Bounds)
		},
		MeshPath: filepath.Join(o.OutDir, "mesh-"+policy+".yaml"),
		Logger:   logger,
		Gateway:  o.Gateway,
	})
	if err != nil {
		return "", nil, nil, fmt.Errorf("%s: %w", policy, err)
	}
	return "http://" + st.Addr, st.Sim.Pace, st.Stop, nil
}

type controlPlane struct {
	srv        *control.Server
	xds, admin string
	stop       func()
}

func startControl(ctx context.Context, o Options, w *workload.Workload, logger *slog.Logger) (*controlPlane, error) {
	mesh, err := meshYAML(w, "127.0.0.1:8000", o.B, o.MaxInflight, o.Bounds)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(o.OutDir, "mesh-envoy.yaml")
	if err := os.WriteFile(path, mesh, 0o644); err != nil {
		return nil, err
	}
	plane, err := controlproc.New(controlproc.Config{ConfigPath: path, Options: control.Options{Logger: logger}})
	if err != nil {
		return nil, fmt.Errorf("control plane: %w", err)
	}
	xdsLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("control plane xDS listener: %w", err)
	}
	adminLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		xdsLn.Close()
		return nil, fmt.Errorf("control plane admin listener: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = plane.Serve(ctx, xdsLn, adminLn)
	}()
	return &controlPlane{srv: plane.Server, xds: xdsLn.Addr().String(), admin: adminLn.Addr().String(),
		stop: func() { cancel(); <-done }}, nil
}
