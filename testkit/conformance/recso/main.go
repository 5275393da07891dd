// Command recso is llmesh-filter.so for the cross-host conformance table
// (testkit/conformance): the product filter, built and registered as
// cmd/llmesh-filter does (envoyfilter.New over process.Env, the same process-wide
// schedulers), with two test taps wired in its Env when LLMESH_RECORDS
// names a file (the table passes a pipe, /dev/fd/3):
//
//   - a Recorder that writes every Record as one JSON line
//     {"kind": "record", "record": …, "err": "…"} (its error as text, the
//     ITL layout left out); it replaces the OTLP recorder, which the
//     table's mesh does not configure;
//   - an admitter around the one process.Schedulers hands out that writes
//     {"kind": "admit", "class": …} when a request reaches Admit and
//     {"kind": "queued", "class": …} once the scheduler reports a request of
//     its class waiting, so the table knows a request is queued without
//     sleeping (as its in-process hosts count Admit calls).
//
// Without LLMESH_RECORDS it is the product filter. Build it with
// go build -buildmode=c-shared; only a main package may import the SDK's
// registration package (its init calls into Envoy).
package main

import (
	"context"
	"encoding/json"
	"os"
	"sync"
	"time"

	"github.com/envoyproxy/envoy/contrib/golang/filters/http/source/go/pkg/http"

	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/envoyfilter"
	"github.com/llmesh/llmesh/envoyfilter/process"
	"github.com/llmesh/llmesh/exchange"
	"github.com/llmesh/llmesh/scheduler"
)

var (
	schedulers = &process.Schedulers{}
	telemetry  = &process.Telemetry{}
)

func init() {
	env := process.Env(schedulers, telemetry)
	if path := os.Getenv("LLMESH_RECORDS"); path != "" {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			panic("recso: LLMESH_RECORDS: " + err.Error())
		}
		out := &lines{f: f}
		env.Recorder = recorder{out}
		env.NewAdmitter = func(c *config.Config) (scheduler.Admitter, error) {
			a, err := schedulers.NewAdmitter(c)
			if err != nil {
				return nil, err
			}
			return &admitter{next: a, out: out}, nil
		}
	}
	p := envoyfilter.New(env)
	http.RegisterHttpFilterFactoryAndConfigParser(envoyfilter.Name, p.Factory, p)
}

// main is required by -buildmode=c-shared and never runs.
func main() {}

// Line is one line of LLMESH_RECORDS.
type Line struct {
	Kind   string           `json:"kind"`
	Record *exchange.Record `json:"record,omitempty"`
	Err    string           `json:"err,omitempty"`
	Class  string           `json:"class,omitempty"`
}

// lines writes Lines, one write each, so that lines from several threads
// never interleave.
type lines struct {
	mu sync.Mutex
	f  *os.File
}

func (l *lines) write(x Line) {
	b, err := json.Marshal(x)
	if err != nil {
		b, _ = json.Marshal(Line{Kind: "error", Err: err.Error()})
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _ = l.f.Write(append(b, '\n'))
}

type recorder struct{ out *lines }

func (r recorder) Record(rec exchange.Record) {
	x := Line{Kind: "record", Record: &rec}
	if rec.Err != nil {
		x.Err = rec.Err.Error()
	}
	rec.Err = nil
	rec.ITL.Layout = nil
	r.out.write(x)
}

var _ envoyfilter.Recorder = recorder{}

// admitter reports Admit calls and queued requests (see the package doc).
type admitter struct {
	next scheduler.Admitter
	out  *lines
}

var _ scheduler.Admitter = (*admitter)(nil)

func (a *admitter) Admit(ctx context.Context, req scheduler.Request) (scheduler.Lease, error) {
	a.out.write(Line{Kind: "admit", Class: req.Class})
	done := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		// Owned by this Admit call: it stops when Admit returns.
		defer close(watched)
		a.watchQueued(req.Class, done)
	}()
	l, err := a.next.Admit(ctx, req)
	close(done)
	<-watched
	return l, err
}

// watchQueued writes a queued line once a request of class waits in the
// scheduler, polling its stats until done.
func (a *admitter) watchQueued(class string, done <-chan struct{}) {
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		for _, p := range schedulers.Stats() {
			if p.Queued[class] > 0 {
				a.out.write(Line{Kind: "queued", Class: class})
				return
			}
		}
		select {
		case <-done:
			return
		case <-tick.C:
		}
	}
}
