package telemetry

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/llmesh/llmesh/exchange"
)

// Span names.
const (
	SpanRequest = "llmesh.request"
	SpanQueue   = "queue"
	SpanPrefill = "prefill"
	SpanDecode  = "decode"
)

// Trace records one request's spans after the fact from obs's timestamps,
// so hosts pay nothing per chunk: a server span SpanRequest from Received
// to End with children queue (Received → Admitted), prefill (Admitted →
// first token, or End without one) and decode (first token → End). ctx may
// carry a remote parent (an incoming traceparent). It returns the request
// span's context (invalid when tracing is a no-op, which costs nothing:
// a nil or no-op tracer provider, or a Provider without OTLP and span
// processors). obs should be finished; an unfinished one ends at its last
// event.
func (r *Recorder) Trace(ctx context.Context, obs exchange.Observation, class, model string) trace.SpanContext {
	if r.noTrace {
		return trace.SpanContext{}
	}
	start := obs.Received
	end := obs.End
	if end.IsZero() {
		end = latest(obs.LastToken, obs.ResponseHeaders, obs.UpstreamSent, obs.Admitted, start)
	}
	if start.IsZero() {
		start = end
	}
	admitted := obs.Admitted
	if admitted.IsZero() {
		admitted = start
	}
	attrs := []attribute.KeyValue{
		AttrClass.String(class),
		AttrModel.String(model),
		attribute.Int("gen_ai.usage.output_tokens", obs.OutputTokens),
		attribute.Int("llmesh.decode.steps", obs.DecodeSteps),
		attribute.String("llmesh.protocol", obs.Protocol.String()),
	}
	if obs.PromptTokens > 0 {
		attrs = append(attrs, attribute.Int("gen_ai.usage.input_tokens", obs.PromptTokens))
	}
	if obs.HTTPStatus != 0 {
		attrs = append(attrs, attribute.Int("http.response.status_code", obs.HTTPStatus))
	}
	if obs.HasGRPCStatus {
		attrs = append(attrs, attribute.Int("rpc.grpc.status_code", obs.GRPCStatus))
	}
	if obs.HasTTFT {
		attrs = append(attrs, attribute.Float64("llmesh.ttft_ms", ms(obs.TTFT)))
	}
	if obs.HasTPOT {
		attrs = append(attrs, attribute.Float64("llmesh.tpot_ms", ms(obs.TPOT)))
	}
	if obs.Engine.Seen {
		attrs = append(attrs, attribute.Int("llmesh.engine.preemptions", obs.Engine.Preemptions))
	}
	ctx, root := r.tracer.Start(ctx, SpanRequest, trace.WithTimestamp(start), trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attrs...))
	if !obs.OK() {
		root.SetAttributes(AttrErrorType.String(obs.ErrorKind.String()))
		root.SetStatus(codes.Error, obs.Error)
	}
	child := func(name string, from, to time.Time) {
		if to.Before(from) {
			to = from
		}
		_, s := r.tracer.Start(ctx, name, trace.WithTimestamp(from))
		s.End(trace.WithTimestamp(to))
	}
	child(SpanQueue, start, admitted)
	if obs.TokenChunks > 0 {
		child(SpanPrefill, admitted, obs.FirstToken)
		child(SpanDecode, obs.FirstToken, end)
	} else {
		child(SpanPrefill, admitted, end)
	}
	root.End(trace.WithTimestamp(end))
	return root.SpanContext()
}

func latest(ts ...time.Time) time.Time {
	var l time.Time
	for _, t := range ts {
		if t.After(l) {
			l = t
		}
	}
	return l
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
