package envoyfilter

import (
	"errors"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/envoyproxy/envoy/contrib/golang/common/go/api"

	"github.com/llmesh/llmesh/exchange"
	"github.com/llmesh/llmesh/scheduler"
)

// MetadataNamespace is the dynamic metadata namespace the filter writes
// for access logs: %DYNAMIC_METADATA(llmesh:ttft_ms)% and so on.
const MetadataNamespace = "llmesh"

// errStreamEnded is the cause recorded when Envoy ends a stream whose
// response never finished (client reset, upstream reset, timeout).
var errStreamEnded = errors.New("stream ended before the response finished")

// Envoy's response flags that say the downstream ended the stream, as bits
// of the response.flags attribute (StreamInfo::legacyResponseFlags: bit n
// is CoreResponseFlag n, envoy/stream_info/stream_info.h).
const (
	// downstreamConnectionTermination (DC, flag 14): the client's
	// connection closed, how an HTTP/1.1 client goes away.
	downstreamConnectionTermination = 1 << 14
	// downstreamRemoteReset (DR, flag 28): the client reset its stream, how
	// an HTTP/2 client (every gRPC client) goes away (conn_manager_impl.cc
	// onResetStream, for a codec reset detailed remote_reset).
	downstreamRemoteReset = 1 << 28
)

// downstreamEnded reports whether Envoy flagged the stream as ended by the
// downstream (DC or DR): a client that went away mid-response, which
// without the flag looks like an upstream reset. A host that does not
// answer the attribute reports false.
func (f *streamFilter) downstreamEnded() bool {
	v, err := f.cb.GetProperty("response.flags")
	if err != nil {
		return false
	}
	n, err := strconv.ParseUint(v, 10, 64)
	return err == nil && n&(downstreamConnectionTermination|downstreamRemoteReset) != 0
}

// misuses counts lifecycle calls a request's state refused
// (exchange.ExchangeConfig.Misuse), each a bug of this host; tests require
// none.
var misuses atomic.Int64

func noteMisuse(call string, s exchange.State) {
	misuses.Add(1)
	api.LogErrorf("llmesh: request lifecycle call %s refused in state %v", call, s)
}

// OnStreamComplete runs before Envoy writes access logs: the observation
// is finished here, the admission released, and the dynamic metadata set.
func (f *streamFilter) OnStreamComplete() {
	defer f.recoverQuiet()
	f.complete()
}

func (f *streamFilter) complete() {
	if !f.started() {
		return // not started, or already recorded
	}
	now := f.clk.Now()
	f.noteAdmitted()
	f.noteAdmitError()
	how, cause := exchange.EndCompleted, error(nil)
	if f.x.State() != exchange.StateFinished {
		// The stream ended without a response end the filter saw.
		cause = errStreamEnded
		if _, ok := f.cb.StreamInfo().ResponseCode(); !ok || f.downstreamEnded() {
			// No response at all, or Envoy saw the downstream end the
			// stream: the client went away first.
			how, cause = exchange.EndClientGone, errors.Join(errStreamEnded, scheduler.ErrCancelled)
		}
	}
	// The core's Record goes to the recorder: the same as the gateway's.
	rec := f.x.End(now, how, cause)
	if rec.OK() {
		f.m.completed.Increment(1)
	} else {
		f.m.failed.Increment(1)
	}
	f.setMetadata(&rec)
}

// setMetadata publishes the measurement for access logs. Values are
// float64, string and bool only: what structpb.NewValue accepts.
func (f *streamFilter) setMetadata(rec *exchange.Record) {
	md := f.cb.StreamInfo().DynamicMetadata()
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	md.Set(MetadataNamespace, "class", rec.Class)
	md.Set(MetadataNamespace, "queue_ms", ms(rec.QueueTime))
	if rec.HasTTFT {
		md.Set(MetadataNamespace, "ttft_ms", ms(rec.TTFT))
	}
	if rec.HasTPOT {
		md.Set(MetadataNamespace, "tpot_ms", ms(rec.TPOT))
	}
	md.Set(MetadataNamespace, "decode_steps", float64(rec.DecodeSteps))
	md.Set(MetadataNamespace, "output_tokens", float64(rec.OutputTokens))
	md.Set(MetadataNamespace, "preempted", rec.Preemptions > 0)
	if rec.Passthrough {
		md.Set(MetadataNamespace, "generation", false)
	}
	if rec.ErrorKind != exchange.ErrorNone {
		md.Set(MetadataNamespace, "error", rec.ErrorKind.String())
	}
}

// OnLog is a fallback for Envoy builds that do not call OnStreamComplete
// first; normally everything was done there.
func (f *streamFilter) OnLog(api.RequestHeaderMap, api.RequestTrailerMap, api.ResponseHeaderMap, api.ResponseTrailerMap) {
	defer f.recoverQuiet()
	f.complete()
}

// OnLogDownstreamStart does nothing.
func (f *streamFilter) OnLogDownstreamStart(api.RequestHeaderMap) {}

// OnLogDownstreamPeriodic does nothing.
func (f *streamFilter) OnLogDownstreamPeriodic(api.RequestHeaderMap, api.RequestTrailerMap, api.ResponseHeaderMap, api.ResponseTrailerMap) {
}

// OnDestroy ends the request. While the request is held in the queue it
// cancels the admission (the goroutine then gives back any lease and does
// not continue the destroyed stream); an admitted request is released as
// cancelled unless it finished before.
func (f *streamFilter) OnDestroy(reason api.DestroyReason) {
	defer f.recoverQuiet()
	f.mu.Lock()
	f.destroyed = true
	holding := f.holding
	cancel := f.cancel
	f.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	if !f.started() {
		// Envoy completed the stream (its own local reply, the buffer
		// limit's 413 for one) while the admission goroutine still waited:
		// a lease it stored since was never handed to the Exchange. One it
		// gets from now on it gives back itself (destroyed).
		if lb := f.lease.Swap(nil); lb != nil {
			lb.Release(scheduler.Cancelled)
		}
		return
	}
	if !holding {
		f.noteAdmitted()
	}
	// Held: the admission goroutine gives back any lease it still gets,
	// and never touches the Exchange.
	f.x.End(f.clk.Now(), exchange.EndDropped, scheduler.ErrCancelled)
}

// recoverQuiet keeps a panic in a non-phase callback (logs, destroy) from
// reaching Envoy; nothing can be replied there.
func (f *streamFilter) recoverQuiet() {
	if e := recover(); e != nil {
		f.m.panics.Increment(1)
		api.LogErrorf("llmesh: panic after the stream: %v", e)
	}
}
