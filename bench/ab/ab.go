// Package ab compares two targets (say, two scheduling policies) on one
// workload: runs alternate A B A B … for N repeats, each pair with the same
// seed, and per-class differences come with bootstrap 95% confidence
// intervals and a verdict.
package ab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/llmesh/llmesh/bench/compare"
	"github.com/llmesh/llmesh/bench/harness"
	"github.com/llmesh/llmesh/bench/provenance"
	"github.com/llmesh/llmesh/bench/result"
	"github.com/llmesh/llmesh/bench/workload"
)

// Target supplies one arm's endpoint.
type Target interface {
	// Name labels the arm in reports.
	Name() string
	// Acquire returns the endpoint for one run and a release function
	// called after it. An implementation may start a fresh engine and
	// proxy per run (the embedded mode) or return a fixed address.
	Acquire(ctx context.Context) (endpoint string, release func(), err error)
}

// URL is a Target at a fixed address.
type URL struct {
	Label    string
	Endpoint string
}

// Name returns the label, or the endpoint when there is none.
func (u URL) Name() string {
	if u.Label != "" {
		return u.Label
	}
	return u.Endpoint
}

// Acquire returns the endpoint; release does nothing.
func (u URL) Acquire(context.Context) (string, func(), error) { return u.Endpoint, func() {}, nil }

// Func is a Target backed by a function, for embedded setups: Start brings
// up whatever serves the arm and returns its endpoint and a stop function.
type Func struct {
	Label string
	Start func(ctx context.Context) (endpoint string, stop func(), err error)
}

// Name returns the label.
func (f Func) Name() string { return f.Label }

// Acquire calls Start.
func (f Func) Acquire(ctx context.Context) (string, func(), error) {
	if f.Start == nil {
		return "", nil, fmt.Errorf("target %q: no Start function", f.Label)
	}
	return f.Start(ctx)
}

var (
	_ Target = URL{}
	_ Target = Func{}
)

// Options configure Compare.
type Options struct {
	// Workload is run against both arms; required.
	Workload *workload.Workload
	// A is the baseline, B the candidate; both required.
	A, B Target
	// Repeats is the number of A-B pairs; default 3. Pair i runs with seed
	// Spec.Seed+i on both arms.
	Repeats int
	// Resamples is the number of bootstrap resamples; default 1000.
	Resamples int
	// Retries is how many times a pair with an invalid run is run again
	// (both arms, the same seed) before the invalid run is kept; 0: never.
	// A host hiccup then costs a pair's time instead of the verdict.
	Retries int
	// Primary declares each class's primary metric for the paired
	// judgement (compare.FromReports); nil: every metric decides.
	Primary map[string]string
	// Alpha is the paired judgement's significance level; default 0.05.
	Alpha float64
	// Progress, when a terminal, shows live progress of each run.
	Progress io.Writer
	// Log, when not nil, gets one line per finished run.
	Log io.Writer
	// JSONL, when not nil, gets every run's per-request records, each
	// with its Run set to arm and pair ("A/1", "B/1", …).
	JSONL io.Writer
	// Run performs one run; nil means harness.Run. Tests and embedded
	// setups may wrap it.
	Run func(context.Context, harness.Options) (*result.Report, []result.Record, error)
}

// Run is one arm's run.
type Run struct {
	Arm    string         `json:"arm"`
	Repeat int            `json:"repeat"`
	Seed   int64          `json:"seed"`
	Report *result.Report `json:"report"`
}

// Retry is one discarded attempt of a pair.
type Retry struct {
	Repeat  int   `json:"repeat"`
	Attempt int   `json:"attempt"` // 1 for the first run of the pair
	Seed    int64 `json:"seed"`
	// Reasons are the invalid runs' reasons, each prefixed with its arm.
	Reasons []string `json:"reasons"`
}

// Result is the comparison.
type Result struct {
	Workload string `json:"workload"`
	A        string `json:"a"`
	B        string `json:"b"`
	Repeats  int    `json:"repeats"`
	// Classes holds per-class deltas (B relative to A).
	Classes map[string][]Delta `json:"classes"`
	// Verdict is the one-line summary of the per-request comparison
	// (Classes): B better / worse / mixed / no significant difference. It
	// is descriptive: requests pooled over repeats ignore how runs differ.
	Verdict string `json:"summary"`
	// Status is the verdict that gates use: the paired judgement over
	// repeats (Paired), or compare.Inconclusive when a run was invalid or
	// did not finish.
	Status compare.Status `json:"verdict"`
	// Paired judges each metric on the per-repeat differences, as
	// `llmesh bench compare` does with one unit per repeat (Student-t
	// intervals, Holm over the non-primary metrics); nil when no verdict
	// could be given (see PairedNote).
	Paired     *compare.Result `json:"paired,omitempty"`
	PairedNote string          `json:"paired_note,omitempty"`
	// Primary is each class's primary metric of the paired judgement
	// (Options.Primary); PrimaryFrom, set by the caller, says where it
	// came from (--primary, the workload file, or none).
	Primary     map[string]string `json:"primary,omitempty"`
	PrimaryFrom string            `json:"primary_from,omitempty"`
	// Gates are the relative gates checked on Paired, set by the caller.
	Gates []compare.GateResult `json:"gates,omitempty"`
	Runs  []Run                `json:"runs"`
	// Retried lists the pairs run again because a run was invalid, one
	// entry per discarded attempt.
	Retried []Retry `json:"retried,omitempty"`
	// Valid is false when any run was invalid (see the runs' reasons) or
	// did not finish.
	Valid bool `json:"valid"`
	// Provenance records each arm's build (when known), the input files,
	// the seeds and the host; set by the caller, nil when unknown.
	Provenance *provenance.Provenance `json:"provenance,omitempty"`
}

// Compare runs the A/B experiment. When ctx ends early it returns what
// finished, with the error.
func Compare(ctx context.Context, o Options) (*Result, error) {
	if o.Workload == nil || o.A == nil || o.B == nil {
		return nil, errors.New("ab: Workload, A and B are required")
	}
	if o.Repeats <= 0 {
		o.Repeats = 3
	}
	if o.Resamples <= 0 {
		o.Resamples = 1000
	}
	run := o.Run
	if run == nil {
		run = harness.Run
	}
	res := &Result{Workload: o.Workload.Spec.Name, A: o.A.Name(), B: o.B.Name(), Repeats: o.Repeats, Valid: true, Primary: o.Primary}
	samples := map[string]*armSamples{"A": newArmSamples(), "B": newArmSamples()}
	var runErr error
	type armRun struct {
		key  string
		rep  *result.Report
		recs []result.Record
	}
	for i := 0; i < o.Repeats && runErr == nil; i++ {
		w := *o.Workload
		w.Spec.Seed = o.Workload.Spec.Seed + int64(i)
		for attempt := 0; runErr == nil; attempt++ {
			var pair []armRun
			var reasons []string
			for _, arm := range []struct {
				key string
				t   Target
			}{{"A", o.A}, {"B", o.B}} {
				id := fmt.Sprintf("%s/%d", arm.key, i+1)
				if attempt > 0 {
					// Records of a discarded attempt keep their own run id.
					id = fmt.Sprintf("%s/%d.%d", arm.key, i+1, attempt+1)
				}
				rep, recs, err := runArm(ctx, run, arm.t, &w, o.Progress, o.JSONL, id)
				if rep != nil {
					pair = append(pair, armRun{arm.key, rep, recs})
					if !rep.Valid {
						reasons = append(reasons, arm.key+": "+strings.Join(rep.InvalidReasons, "; "))
					}
					if o.Log != nil {
						fmt.Fprintf(o.Log, "ab: repeat %d arm %s (%s): %d ok, %d failed, %s\n", i+1, arm.key, arm.t.Name(), rep.Completed, rep.Failed, validity(rep))
					}
				}
				if err != nil {
					runErr = fmt.Errorf("repeat %d arm %s (%s): %w", i+1, arm.key, arm.t.Name(), err)
					break
				}
			}
			if runErr == nil && len(reasons) > 0 && attempt < o.Retries {
				res.Retried = append(res.Retried, Retry{Repeat: i, Attempt: attempt + 1, Seed: w.Spec.Seed, Reasons: reasons})
				if o.Log != nil {
					fmt.Fprintf(o.Log, "ab: repeat %d: an invalid run (%s); running the pair again (retry %d of %d)\n", i+1, strings.Join(reasons, " / "), attempt+1, o.Retries)
				}
				continue
			}
			for _, p := range pair {
				res.Runs = append(res.Runs, Run{Arm: p.key, Repeat: i, Seed: w.Spec.Seed, Report: p.rep})
				samples[p.key].add(p.recs, p.rep, o.Workload)
				if !p.rep.Valid {
					res.Valid = false
				}
			}
			break
		}
	}
	// An A/B that did not run every run is no experiment: it never
	// claims to be valid, whatever the runs that finished say.
	if runErr != nil || len(res.Runs) != 2*o.Repeats {
		res.Valid = false
	}
	res.Classes = deltas(samples["A"], samples["B"], o.Workload, o.Resamples)
	res.Verdict = verdict(res)
	res.Status, res.Paired, res.PairedNote = judgePaired(res, o)
	if !res.Valid {
		res.Verdict = inconclusive(res, runErr)
		// No per-metric verdict either: the figures are for information.
		for _, ds := range res.Classes {
			for j := range ds {
				ds[j].Verdict = ""
			}
		}
	}
	return res, runErr
}

// judgePaired judges the valid A/B's metrics on the per-repeat
// differences: repeats are the independent units, requests are not.
func judgePaired(res *Result, o Options) (compare.Status, *compare.Result, string) {
	if !res.Valid {
		return compare.Inconclusive, nil, "an invalid or missing run: no verdict"
	}
	alpha := o.Alpha
	if alpha == 0 {
		alpha = 0.05
	}
	var a, b []*result.Report
	for _, r := range res.Runs {
		if r.Arm == "A" {
			a = append(a, r.Report)
		} else {
			b = append(b, r.Report)
		}
	}
	ms, err := compare.FromReports(a, b, o.Primary)
	if err == nil {
		var j *compare.Result
		if j, err = compare.Judge(ms, alpha); err == nil {
			return j.Verdict, j, ""
		}
	}
	return compare.Inconclusive, nil, err.Error()
}

// Inconclusive starts the verdict of an A/B with an invalid run: the
// harness's lateness could have moved a reported figure, so no verdict is
// given (the deltas are still reported, for information).
const Inconclusive = "Inconclusive"

func inconclusive(res *Result, runErr error) string {
	if want := 2 * res.Repeats; len(res.Runs) != want || runErr != nil {
		cause := "stopped"
		if runErr != nil {
			cause = runErr.Error()
		}
		return fmt.Sprintf("%s: %d of %d runs finished (%s): no verdict", Inconclusive, len(res.Runs), want, cause)
	}
	n, first := 0, ""
	for _, r := range res.Runs {
		if r.Report != nil && !r.Report.Valid {
			n++
			if first == "" && len(r.Report.InvalidReasons) > 0 {
				first = r.Report.InvalidReasons[0]
			}
		}
	}
	retried := ""
	if len(res.Retried) > 0 {
		retried = fmt.Sprintf(" after %d retries", len(res.Retried))
	}
	return fmt.Sprintf("%s: %d of %d runs invalid%s (%s): no verdict; the deltas are for information only. %s", Inconclusive, n, len(res.Runs), retried, first, InconclusiveAdvice)
}

// InconclusiveAdvice is what to do about invalid runs: they are the
// harness or the arms falling behind on a busy host.
const InconclusiveAdvice = "To get a verdict: pin the engine, gateway and harness to their own cores (taskset), lower the rate, or run on an idle host; --retries re-runs an invalid pair."

func validity(rep *result.Report) string {
	if rep.Valid {
		return "valid"
	}
	return "INVALID: " + strings.Join(rep.InvalidReasons, "; ")
}

func runArm(ctx context.Context, run func(context.Context, harness.Options) (*result.Report, []result.Record, error), t Target, w *workload.Workload, progress, jsonl io.Writer, id string) (*result.Report, []result.Record, error) {
	ep, release, err := t.Acquire(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("starting target: %w", err)
	}
	defer release()
	return run(ctx, harness.Options{Workload: w, Target: ep, Label: t.Name(), Policy: t.Name(), Progress: progress, JSONL: jsonl, RunID: id})
}
