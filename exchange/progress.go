package exchange

import "github.com/llmesh/llmesh/scheduler"

// progressReporter tells a request's lease how far its stream got, as
// both hosts do per response chunk: once at the first token, then at
// every change of the token count, never twice for the same progress. The
// zero value is ready; it allocates nothing.
type progressReporter struct {
	tokens int
	first  bool
}

// Report sends o's progress to l when it moved since the last report. A
// nil l is ignored.
func (r *progressReporter) Report(l scheduler.Lease, o *Observer) {
	if l == nil {
		return
	}
	p := o.Progress()
	if p.Tokens != r.tokens || (p.FirstToken && !r.first) {
		r.tokens, r.first = p.Tokens, p.FirstToken
		l.Progress(p)
	}
}

// OutcomeOf is how a finished request's admission is released: preempted
// when the host stopped it for the scheduler, cancelled when its client
// went away, failed on any other error, done otherwise.
func OutcomeOf(ob *Observation, preempted bool) scheduler.Outcome {
	switch {
	case preempted:
		return scheduler.Preempted
	case ob.ErrorKind == ErrorCancelled:
		return scheduler.Cancelled
	case !ob.OK():
		return scheduler.Failed
	}
	return scheduler.Done
}
