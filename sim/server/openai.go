package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/llmesh/llmesh/sim"
)

// Handler serves the OpenAI-compatible API, /health and /metrics.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) { s.serveOpenAI(w, r, false) })
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { s.serveOpenAI(w, r, true) })
	mux.HandleFunc("GET /v1/models", s.serveModels)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{}))
	return mux
}

func (s *Server) serveModels(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"object": "list",
		"data": []map[string]any{{
			"id": s.cfg.ServedModelName, "object": "model", "created": s.created, "owned_by": "llmesh",
			"root": s.profile.Name, "max_model_len": s.cfg.Engine.MaxModelLen,
		}},
	})
}

// engineTruth is the engine's own account of a request, in Unix
// nanoseconds of the engine clock (0: did not happen).
type engineTruth struct {
	ArrivalNs        int64 `json:"arrival_ns"`
	FirstScheduledNs int64 `json:"first_scheduled_ns"`
	FirstTokenNs     int64 `json:"first_token_ns"`
	FinishNs         int64 `json:"finish_ns"`
	Preemptions      int   `json:"preemptions"`
}

func unixNs(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func (r *result) truth() engineTruth {
	return engineTruth{unixNs(r.arrival), unixNs(r.sched), unixNs(r.first), unixNs(r.finish), r.preempts}
}

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// apiError writes an OpenAI-style error object.
func apiError(w http.ResponseWriter, status int, param, msg string) {
	typ, code := "invalid_request_error", any(nil)
	switch status {
	case http.StatusNotFound:
		code = "model_not_found"
	case http.StatusTooManyRequests:
		typ, code = "rate_limit_error", "rate_limit_exceeded"
		w.Header().Set("Retry-After", "1")
	case http.StatusServiceUnavailable:
		typ, code = "server_error", "service_unavailable"
		w.Header().Set("Retry-After", "1")
	case http.StatusInternalServerError:
		typ = "server_error"
	}
	var p any
	if param != "" {
		p = param
	}
	writeJSON(w, status, map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": p, "code": code}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeRequestError(w http.ResponseWriter, err error) {
	var re *requestError
	if errors.As(err, &re) {
		apiError(w, re.Status, re.Param, re.Msg)
		return
	}
	apiError(w, http.StatusInternalServerError, "", err.Error())
}

func faultMessage(status int) string {
	return fmt.Sprintf("simulated failure (HTTP %d) injected by the simulated engine", status)
}

// prepare turns a parsed API request into an engine request.
func (s *Server) prepare(req *apiRequest, fault Fault) (genRequest, error) {
	if err := s.checkModel(req.model); err != nil {
		return genRequest{}, err
	}
	g := genRequest{prompt: req.prompt, maxTokens: req.maxTokens, priority: req.priority, seed: s.cfg.Seed, fault: fault}
	if g.maxTokens == 0 {
		g.maxTokens = min(s.cfg.DefaultMaxTokens, s.cfg.Engine.MaxModelLen-len(g.prompt))
	}
	if req.seed != nil {
		g.seed = *req.seed
	}
	if err := s.checkSize(len(g.prompt), g.maxTokens); err != nil {
		return genRequest{}, err
	}
	return g, nil
}

func (s *Server) serveOpenAI(w http.ResponseWriter, r *http.Request, chat bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		apiError(w, http.StatusBadRequest, "", fmt.Sprintf("reading body: %v (limit %d bytes)", err, maxBodyBytes))
		return
	}
	fault, err := s.faults.draw(r.Header.Get(FaultHeader))
	if err != nil {
		apiError(w, http.StatusBadRequest, FaultHeader, err.Error())
		return
	}
	if fault.Status != 0 {
		apiError(w, fault.Status, "", faultMessage(fault.Status))
		return
	}
	var req *apiRequest
	if chat {
		req, err = parseChatTurn(body, s.quirks.Has(QuirkNoContinueFinalMessage))
	} else {
		req, err = parseCompletion(body)
	}
	if err != nil {
		writeRequestError(w, err)
		return
	}
	g, err := s.prepare(req, fault)
	if err != nil {
		writeRequestError(w, err)
		return
	}
	o := openAIOut{s: s, req: req, id: s.responseID(chat), created: s.clk.Now().Unix()}
	if req.stream {
		s.streamOpenAI(r.Context(), w, g, &o)
		return
	}
	res, err := s.generate(r.Context(), g, func([]uint32, bool) error { return nil })
	if err != nil {
		if errors.Is(err, errDropped) {
			panic(http.ErrAbortHandler)
		}
		if r.Context().Err() == nil {
			apiError(w, http.StatusServiceUnavailable, "", err.Error())
		}
		return
	}
	text := sim.Detokenize(res.ids)
	choice := map[string]any{"index": 0, "logprobs": nil, "finish_reason": "length"}
	if chat {
		choice["message"] = map[string]any{"role": "assistant", "content": text}
	} else {
		choice["text"] = text
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"id": o.id, "object": o.object(false), "created": o.created, "model": s.cfg.ServedModelName,
		"choices": []any{choice}, "usage": o.usage(res), "llmesh_engine": res.truth(),
	})
}

// openAIOut shapes one response's chunks.
type openAIOut struct {
	s       *Server
	req     *apiRequest
	id      string
	created int64
}

func (o *openAIOut) object(chunk bool) string {
	switch {
	case o.req.chat && chunk:
		return "chat.completion.chunk"
	case o.req.chat:
		return "chat.completion"
	}
	return "text_completion"
}

func (o *openAIOut) usage(r *result) usage {
	return usage{len(o.req.prompt), len(r.ids), len(o.req.prompt) + len(r.ids)}
}

// streamOpenAI writes one SSE event per engine step, each written and
// flushed as the step ends. The chunk with the finish reason carries the
// engine's ground truth in "llmesh_engine"; with include_usage, so does the
// usage chunk that follows it. The final chunk, the usage chunk and
// [DONE] are ready at the same moment and go out in one write.
func (s *Server) streamOpenAI(ctx context.Context, w http.ResponseWriter, g genRequest, o *openAIOut) {
	g.perToken = true // one event per token, below
	fl, _ := w.(http.Flusher)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	enc := newSSEEncoder(o)
	flush := func() error {
		_, err := w.Write(enc.buf)
		enc.reset()
		if err != nil {
			return err
		}
		if fl != nil {
			fl.Flush()
		}
		return nil
	}
	switch {
	case o.req.chat && s.quirks.Has(QuirkRoleChunkFirst):
		enc.roleOnly()
		if flush() != nil {
			return
		}
	case o.req.chat: // a chat stream's first event names the role
		enc.chunk("", true, false, nil)
		if flush() != nil {
			return
		}
	case s.quirks.Has(QuirkRoleChunkFirst):
		enc.chunk("", false, false, nil)
		if flush() != nil {
			return
		}
	}
	var lastText string
	merge := s.quirks.Has(QuirkMergeDeltas)
	res, err := s.generate(ctx, g, func(ids []uint32, done bool) error {
		// One event per token, even when several steps' tokens are pending
		// because this handler fell behind the engine: clients that count
		// token-bearing events (the gateway's observer, and its
		// continuation of a preempted stream) then count exactly. They go
		// out in one write. (vLLM's V1 API server merges such tokens into
		// one delta instead; docs/gateway.md says what that costs.)
		if done {
			// The last token is held back until the result (and its
			// truth) is known.
			ids, lastText = ids[:len(ids)-1], sim.Detokenize(ids[len(ids)-1:])
		}
		if merge && len(ids) > 0 {
			enc.chunk(sim.Detokenize(ids), false, false, nil)
		} else {
			for i := range ids {
				enc.chunk(sim.Detokenize(ids[i:i+1]), false, false, nil)
			}
		}
		if len(ids) == 0 {
			return nil
		}
		return flush()
	})
	switch {
	case errors.Is(err, errDropped):
		panic(http.ErrAbortHandler)
	case err != nil:
		if ctx.Err() == nil {
			b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": err.Error(), "type": "server_error", "param": nil, "code": 503}})
			enc.buf = append(append(append(enc.buf, "data: "...), b...), "\n\n"...)
			_ = flush()
		}
		return
	}
	truth := res.truth()
	enc.chunk(lastText, false, true, &truth)
	if o.req.includeUsage || s.quirks.Has(QuirkUsageWithoutStreamOptions) {
		enc.usage(o.usage(res), &truth)
	}
	enc.done()
	_ = flush()
}

func (s *Server) responseID(chat bool) string {
	p := "cmpl"
	if chat {
		p = "chatcmpl"
	}
	return fmt.Sprintf("%s-%x-%d", p, s.created, s.respID.Add(1))
}
