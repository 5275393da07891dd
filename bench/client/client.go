// Package client sends one benchmark request and records what came back
// with a timestamp per received event: OpenAI-compatible HTTP (SSE streams
// or JSON bodies) and gRPC streaming (llm.v1 Generation, vLLM's engine API).
// Clients are safe for concurrent use; each Do call owns its Record.
package client

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/llmesh/llmesh/bench/result"
	"github.com/llmesh/llmesh/bench/trace"
	"github.com/llmesh/llmesh/bench/workload"
	"github.com/llmesh/llmesh/sim"
)

// Request is one request to send.
type Request struct {
	// ID is unique within a run; it is sent as the request id where the
	// protocol has one.
	ID    string
	Model string
	// PromptTokens sizes the synthetic prompt; MaxTokens is sent as
	// max_tokens with ignore_eos so the output has exactly that length.
	PromptTokens int
	MaxTokens    int
	// Priority is sent as the request's priority field when SendPriority.
	Priority     int
	SendPriority bool
	// Headers go out as HTTP headers or gRPC metadata.
	Headers map[string]string
	// Stream asks for a streamed response (always true for gRPC).
	Stream bool
	// Segments, when set, give the prompt an identity (workload.Item): its
	// tokens are trace.PromptTokens of them, sent as token ids over gRPC and
	// as their words (sim.Word, one token each in the simulated engine's
	// tokenizer) over the OpenAI API, so prompts with equal segments are
	// equal text and an engine's prefix cache hits where they agree.
	// PromptTokens is then their length.
	Segments []trace.Segment
}

// promptIDs returns the token ids of a request with segments.
func (req *Request) promptIDs() []uint32 {
	return trace.PromptTokens(make([]uint32, 0, req.PromptTokens), req.Segments, sim.VocabSize)
}

// Clock gives the run-relative time in nanoseconds; every timestamp in a
// Record comes from it.
type Clock func() int64

// Client sends requests to one target.
type Client interface {
	// Do sends req and fills rec's SentNS (just before the request is
	// written), FirstTokenNS, ChunkNS, DoneNS, OutputTokens, Status, Code,
	// Error and Engine. It never returns an error: failures are recorded.
	Do(ctx context.Context, req *Request, rec *result.Record, now Clock)
	// Close releases connections.
	Close() error
}

// New returns the client for protocol (workload.Protocol*) and target: an
// http(s) URL for the OpenAI protocols (a bare host:port means http; a URL
// without a path gets /v1/completions or /v1/chat/completions), host:port
// or grpc://host:port for the gRPC ones. maxConns bounds idle keep-alive
// connections (0: 1024).
func New(protocol, target string, maxConns int) (Client, error) {
	if target == "" {
		return nil, errors.New("target: must be set")
	}
	switch protocol {
	case workload.ProtocolCompletions, workload.ProtocolChat:
		u, err := openAIURL(protocol, target)
		if err != nil {
			return nil, err
		}
		return newOpenAI(protocol == workload.ProtocolChat, u, maxConns), nil
	case workload.ProtocolGRPC, workload.ProtocolVLLM:
		addr, err := grpcAddr(target)
		if err != nil {
			return nil, err
		}
		return newGRPC(protocol == workload.ProtocolVLLM, addr)
	}
	return nil, fmt.Errorf("protocol: %q must be one of openai-completions, openai-chat, grpc-llm-v1, grpc-vllm", protocol)
}

func openAIURL(protocol, target string) (string, error) {
	if !strings.Contains(target, "://") {
		target = "http://" + target
	}
	u, err := url.Parse(target)
	if err != nil {
		return "", fmt.Errorf("target: %q is not a URL: %w", target, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("target: %q: scheme must be http or https for %s", target, protocol)
	}
	if u.Host == "" {
		return "", fmt.Errorf("target: %q has no host", target)
	}
	endpoint := "/v1/completions"
	if protocol == workload.ProtocolChat {
		endpoint = "/v1/chat/completions"
	}
	switch p := strings.TrimSuffix(u.Path, "/"); {
	case p == "":
		u.Path = endpoint
	case p == "/v1":
		u.Path = endpoint
	}
	return u.String(), nil
}

func grpcAddr(target string) (string, error) {
	addr := strings.TrimPrefix(target, "grpc://")
	if strings.Contains(addr, "://") || strings.Contains(addr, "/") {
		return "", fmt.Errorf("target: %q: want host:port or grpc://host:port for gRPC", target)
	}
	i := strings.LastIndexByte(addr, ':')
	if i <= 0 {
		return "", fmt.Errorf("target: %q: want host:port", target)
	}
	if p, err := strconv.Atoi(addr[i+1:]); err != nil || p <= 0 || p > 65535 {
		return "", fmt.Errorf("target: %q: port must be 1-65535", target)
	}
	return addr, nil
}

// words are the synthetic prompt vocabulary: short common words that
// whitespace tokenizers (the sim) and BPE tokenizers (real engines) both
// count as about one token each.
var words = []string{"the", "of", "and", "to", "in", "is", "you", "that", "it", "he", "was", "for", "on", "are", "as", "with"}

// Prompt returns a synthetic prompt of n words. It starts with a word
// derived from seed so that requests do not share a long common prefix
// (which prefix caching would make unrealistically cheap).
func Prompt(seed, n int) string {
	if n <= 0 {
		return ""
	}
	var b strings.Builder
	b.Grow(4 * n)
	b.WriteString("r")
	b.WriteString(strconv.Itoa(seed))
	for i := 1; i < n; i++ {
		b.WriteByte(' ')
		b.WriteString(words[(i*7+seed)&15])
	}
	return b.String()
}

// setOutput records a finished response's output tokens: the engine's
// usage (usage < 0: none reported) unless it said 0 while the stream
// carried tokens, which is an engine that never filled the field.
func setOutput(rec *result.Record, counted, usage int) {
	if usage >= 0 && (usage > 0 || counted == 0) {
		rec.OutputTokens, rec.OutputTokensSource = usage, result.SourceUsage
		return
	}
	rec.OutputTokens, rec.OutputTokensSource = counted, result.SourceStream
}

// classify maps an HTTP status to a record status (a 429 from llmesh's
// own queue is told apart by queueFull).
func classifyHTTP(code int, retryAfter bool) result.Status {
	switch {
	case code == 429:
		return result.StatusRejected
	case code == 503 && retryAfter:
		return result.StatusPreempted
	}
	return result.StatusError
}

// queueFull reports whether a 429 or RESOURCE_EXHAUSTED came from llmesh's
// own queue: the Envoy filter's x-llmesh-reply header, the gateway's
// OpenAI error type, or the scheduler's error text in a gRPC message. An
// engine's words ("queue full" from vLLM or a test server) do not count.
func queueFull(replyHeader, body string) bool {
	return replyHeader == "llmesh_queue_full" || strings.Contains(body, `"type":"queue_full"`) ||
		strings.Contains(body, "scheduler: queue full")
}

// preemptedText reports whether an error message says the request was
// preempted (the gateway's mid-stream error event).
func preemptedText(s string) bool { return strings.Contains(strings.ToLower(s), "preempt") }
