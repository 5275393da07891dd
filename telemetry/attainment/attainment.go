// Package attainment is the one rule that says whether a request met its
// class's SLOs. The bench (bench/stats, over client-side records) and the
// hosts (telemetry, over the gateway's and filter's observations, exported
// as llmesh_slo_met) both call Judge, so a request the bench counts as a
// miss is never counted as met by a live mesh. It imports nothing of
// either side, so both can use it.
//
// The rule (docs/architecture.md, Definitions):
//
//   - a request that failed misses, whatever its timings;
//   - with a TTFT target, the request must have had a first token, no later
//     than the target;
//   - with a TPOT target, the request's TPOT ((E2E − TTFT) / (output
//     tokens − 1)) must be at most the target. TPOT is defined only from
//     two output tokens on. A request with fewer is met only when it got a
//     token and could not have had more: it asked for one token
//     (MaxTokens 1), or the engine ended it at its length limit (finish
//     reason "length"), which for one token means the same. Any other request
//     without a TPOT misses: a TPOT that cannot be checked is unknown, and
//     unknown does not meet an SLO. That covers an engine that reports no
//     usage and sends its whole answer in one chunk (it once passed every
//     TPOT target this way) and, by the same rule, a one-token answer that
//     ended at end-of-sequence although more were asked: the two cannot be
//     told apart from the response alone;
//   - a target of 0 is no target.
package attainment

import "time"

// Targets are a class's SLOs; zero fields are not set.
type Targets struct {
	TTFT, TPOT time.Duration
}

// Outcome is what the rule needs to know of one finished request.
type Outcome struct {
	// Failed: the request did not complete (an error, a rejection, a
	// preemption that was not resumed, a dropped stream, a timeout).
	Failed bool
	// TTFT and TPOT, valid only when HasTTFT and HasTPOT.
	TTFT, TPOT       time.Duration
	HasTTFT, HasTPOT bool
	// MaxTokens is the output the request asked for; 0 when not known
	// (a host that does not read the request body).
	MaxTokens int
	// LengthLimited: the engine ended the response because it reached
	// the request's token limit (finish reason "length"), where reported.
	LengthLimited bool
}

// Result is how one request fared.
type Result struct {
	// Met is true when the request completed and met every target its
	// class has (a class without targets is met by every success).
	Met    bool
	Failed bool
	// TTFTMissed: no first token, or a late one (TTFT target set).
	TTFTMissed bool
	// TPOTMissed: a TPOT above the target.
	TPOTMissed bool
	// TPOTUnknown: a TPOT target is set and the TPOT could not be
	// computed although the request asked for more than one token.
	TPOTUnknown bool
}

// Judge applies the rule to one request. A failed request reports only
// Failed: its timings are not judged.
func Judge(o Outcome, t Targets) Result {
	if o.Failed {
		return Result{Failed: true}
	}
	var r Result
	r.TTFTMissed = t.TTFT > 0 && (!o.HasTTFT || o.TTFT > t.TTFT)
	switch {
	case t.TPOT <= 0:
	case o.HasTPOT:
		r.TPOTMissed = o.TPOT > t.TPOT
	case o.HasTTFT && (o.MaxTokens == 1 || o.LengthLimited):
		// Nothing to pace: the request got its token and could not have
		// had a second one.
	default:
		r.TPOTUnknown = true
	}
	r.Met = !r.TTFTMissed && !r.TPOTMissed && !r.TPOTUnknown
	return r
}
