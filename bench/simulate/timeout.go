package simulate

import (
	"fmt"
	"time"

	"github.com/llmesh/llmesh/bench/result"
	"github.com/llmesh/llmesh/scheduler"
)

// The harness's client gives up on a request at the workload's timeout
// (bench/runner: each request runs under context.WithTimeout), and so does
// the simulated one unless Options.RunPastTimeout: at arrival + timeout a
// request that has not ended is abandoned. A waiting request is withdrawn
// from the scheduler's queue (Machine.Cancel: a dead mark, skipped when it
// reaches the front) and is never admitted; a running one is cancelled on
// its engine (its slot and KV cache freed) and its lease released as
// Cancelled. Its record ends at the timeout with status timeout and the
// tokens the client had received by then.
//
// In a fleet the client is at its proxy: what the proxy would learn after
// the timeout (tokens, a finish, an admission) is not the client's, and
// the withdrawal and the release reach the scheduler a hop later, the
// abort the engine a hop later, as a preemption's do.

// clientTimeouts finds the requests whose client gives up. Every request
// has the same timeout counted from its arrival and requests arrive in
// order, so the next to give up is the oldest arrived request that has
// not ended: a pointer that only moves forward.
type clientTimeouts struct {
	after time.Duration // 0: the client never gives up
	head  int           // no request before it can still be given up
	msg   string        // the record's error
}

func newClientTimeouts(after time.Duration) clientTimeouts {
	if after <= 0 {
		return clientTimeouts{}
	}
	return clientTimeouts{after: after, msg: fmt.Sprintf("the client gave up at the workload's timeout %v", after)}
}

// next is when the next client gives up, of the requests arrived so far;
// zero when none will.
func (c *clientTimeouts) next(arrived requests) time.Time {
	if c.after <= 0 {
		return time.Time{}
	}
	n := arrived.len()
	for c.head < n && arrived.at(c.head).done {
		c.head++
	}
	if c.head == n {
		return time.Time{}
	}
	return arrived.at(c.head).arrival().Add(c.after)
}

// due returns a request whose client gives up by now, or nil; the caller
// ends it before asking again.
func (c *clientTimeouts) due(arrived requests, now time.Time) *vreq {
	if t := c.next(arrived); t.IsZero() || t.After(now) {
		return nil
	}
	return arrived.at(c.head)
}

// abandon is v's client giving up at its proxy at now. A request the
// proxy runs is cancelled as a preempted one is, without the requeue; one
// the proxy does not run (waiting in the scheduler, or its arrival,
// admission or requeue on the way) is withdrawn from the scheduler, which
// releases it as cancelled should it have admitted it meanwhile.
func (f *fleet) abandon(v *vreq) {
	v.abandoned = true
	if a := v.att; a != nil {
		f.detach(a)
		a.abandoned = true
		f.send(msg{kind: mAbort, a: a})
		f.send(msg{kind: mFinish, v: v, tk: v.ticket, out: scheduler.Cancelled})
		f.c.timeoutsRunning++
	} else {
		f.send(msg{kind: mCancel, v: v})
		f.c.timeoutsQueued++
	}
	f.end(v, result.StatusTimeout, f.clients.msg, f.now)
}

// lateForClient reports whether what reaches v's proxy at client (ns
// since epoch) comes after its client gave up.
func (f *fleet) lateForClient(v *vreq, client int64) bool {
	// v.arrival() is epoch + v.it.At: no time arithmetic per token.
	return f.clients.after > 0 && client > int64(v.it.At)+int64(f.clients.after)
}
