package exchange

import (
	"strconv"

	"github.com/llmesh/llmesh/scheduler"
)

// State is where a request is in its lifecycle (Exchange.State). States
// only move forward, except Requeued, which goes back to Admitted or
// Streaming when the request is admitted again.
type State uint8

const (
	// StateIdle: a zero Exchange, not started.
	StateIdle State = iota
	// StateReceived: the head is read (Start); the body phase (NoteModel,
	// Size, Guard) runs until the admission.
	StateReceived
	// StateAdmitted: admitted, with a lease or let through; the upstream
	// attempt is under way and has not answered.
	StateAdmitted
	// StateRequeued: preempted with nothing lost (Requeued); the lease is
	// given back and the host waits for the next admission.
	StateRequeued
	// StateStreaming: the response head arrived; chunks and trailers follow.
	StateStreaming
	// StateFinished: the response is over (Finish): the observation ended
	// and the admission was released. Only ServerTiming and End remain.
	StateFinished
	// StateEnded: the Record was made (End). Start may begin a new request.
	StateEnded
	numStates
)

var stateNames = [numStates]string{"idle", "received", "admitted", "requeued", "streaming", "finished", "ended"}

func (s State) String() string {
	if s < numStates {
		return stateNames[s]
	}
	return "state(" + strconv.Itoa(int(s)) + ")"
}

// live: started and the response not over.
func (s State) live() bool { return s >= StateReceived && s <= StateStreaming }

// Ending is how a request ended, as its host saw it (Exchange.Finish,
// Exchange.End). The host says what happened; the Exchange decides the
// scheduler outcome, the Record's Err and the observation's error.
type Ending uint8

const (
	// EndCompleted: the response ran to its end as the host saw it (cause
	// nil), or was cut by cause (an error the host cannot tell apart, such
	// as Envoy's stream end without a response end). The outcome follows
	// the observation (OutcomeOf); the Record's Err stays nil.
	EndCompleted Ending = iota
	// EndRefused: the host answered the request itself (an admission
	// error, an invalid body, the priority guard, relocation); cause is
	// what the client was told, recorded as an HTTP-status error. A
	// refusal caused by a cancellation (scheduler.ErrCancelled) is
	// EndClientGone. Released as failed.
	EndRefused
	// EndClientGone: the client went away (cause: why, may be nil).
	// Released as cancelled.
	EndClientGone
	// EndFailed: the upstream failed (a reset, a stall, a failed
	// continuation); cause is the Record's Err and the observation's
	// error. Released as failed.
	EndFailed
	// EndPreempted: the scheduler ended the request and the host cannot
	// send it again; the preemption is counted. cause nil means
	// scheduler.ErrPreempted. Released as preempted; the client's reply is
	// ReplyFor(scheduler.ErrPreempted).
	EndPreempted
	// EndFault: the host's own fault (a panic). Released as failed at
	// once; the observation is left as it is (the observer may be what
	// broke).
	EndFault
	// EndDropped: the host lost the request before it could report it
	// (Envoy's OnDestroy without a log phase). Released as cancelled; End
	// makes no Record.
	EndDropped
	// EndUnreachable: the upstream could not be reached (the connection
	// failed: nothing was sent); cause is the Record's Err and the
	// observation's error. Released as unreachable, which takes the
	// endpoint out of the picker at once (scheduler.Unreachable).
	EndUnreachable
	numEndings
)

var endingNames = [numEndings]string{"completed", "refused", "client-gone", "failed", "preempted", "fault", "dropped", "unreachable"}

func (e Ending) String() string {
	if e < numEndings {
		return endingNames[e]
	}
	return "ending(" + strconv.Itoa(int(e)) + ")"
}

// outcome is how the admission of a request that ended so is released.
func (e Ending) outcome(ob *Observation) scheduler.Outcome {
	switch e {
	case EndCompleted:
		return OutcomeOf(ob, false)
	case EndClientGone, EndDropped:
		return scheduler.Cancelled
	case EndPreempted:
		return scheduler.Preempted
	case EndUnreachable:
		return scheduler.Unreachable
	}
	return scheduler.Failed
}

// call names an Exchange method that moves or reads the lifecycle.
type call uint8

const (
	callStart call = iota
	callNoteModel
	callSize
	callGuard
	callAdmitted
	callUpstreamSent
	callResponseHead
	callChunk
	callTrailers
	callRequeued
	callFinish
	callEnd
	callServerTiming
	numCalls
)

var callNames = [numCalls]string{"Start", "NoteModel", "Size", "Guard", "Admitted", "UpstreamSent", "ResponseHead",
	"Chunk", "Trailers", "Requeued", "Finish", "End", "ServerTiming"}

func (c call) String() string { return callNames[c] }

// states is a set of States.
type states uint16

func in(ss ...State) states {
	var m states
	for _, s := range ss {
		m |= 1 << s
	}
	return m
}

// allowedIn is the transition table: the states in which each call is
// allowed. Where it leads is written next to each method (and checked by
// TestExchangeTransitions); anywhere else the call does nothing.
var allowedIn = [numCalls]states{
	callStart:        in(StateIdle, StateEnded),
	callNoteModel:    in(StateReceived, StateAdmitted, StateStreaming),
	callSize:         in(StateReceived),
	callGuard:        in(StateReceived, StateAdmitted),
	callAdmitted:     in(StateReceived, StateRequeued),
	callUpstreamSent: in(StateAdmitted, StateStreaming),
	callResponseHead: in(StateReceived, StateAdmitted),
	callChunk:        in(StateStreaming),
	callTrailers:     in(StateStreaming),
	callRequeued:     in(StateAdmitted, StateStreaming),
	callFinish:       in(StateReceived, StateAdmitted, StateRequeued, StateStreaming),
	callEnd:          in(StateReceived, StateAdmitted, StateRequeued, StateStreaming, StateFinished),
	callServerTiming: in(StateReceived, StateAdmitted, StateRequeued, StateStreaming, StateFinished),
}

// allowed reports whether c is allowed in the current state, and tells
// ExchangeConfig.Misuse when it is not.
func (x *Exchange) allowed(c call) bool {
	if allowedIn[c]&(1<<x.state) != 0 {
		return true
	}
	x.misuse(c)
	return false
}

func (x *Exchange) misuse(c call) {
	if x.cfg != nil && x.cfg.Misuse != nil {
		x.cfg.Misuse(c.String(), x.state)
	}
}
