package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/llmesh/llmesh/api/llmv1"
	"github.com/llmesh/llmesh/api/vllmpb"
	"github.com/llmesh/llmesh/bench/result"
)

// grpcClient speaks llm.v1 Generation or vLLM's engine API over one
// connection (HTTP/2 multiplexes the streams).
type grpcClient struct {
	vllm bool
	conn *grpc.ClientConn
	llm  llmv1.GenerationClient
	eng  vllmpb.VllmEngineClient
}

func newGRPC(vllm bool, addr string) (*grpcClient, error) {
	conn, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)),
		// Large windows so a fast stream is never throttled by flow control.
		grpc.WithInitialWindowSize(4<<20), grpc.WithInitialConnWindowSize(16<<20))
	if err != nil {
		return nil, fmt.Errorf("target: %q: %w", addr, err)
	}
	return &grpcClient{vllm: vllm, conn: conn, llm: llmv1.NewGenerationClient(conn), eng: vllmpb.NewVllmEngineClient(conn)}, nil
}

func (c *grpcClient) Close() error { return c.conn.Close() }

func (c *grpcClient) Do(ctx context.Context, req *Request, rec *result.Record, now Clock) {
	if len(req.Headers) > 0 {
		kv := make([]string, 0, 2*len(req.Headers))
		for k, v := range req.Headers {
			kv = append(kv, k, v)
		}
		ctx = metadata.AppendToOutgoingContext(ctx, kv...)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		prompt string
		ids    []uint32
	)
	if req.Segments != nil {
		ids = req.promptIDs()
	} else {
		prompt = Prompt(req.seed(), req.PromptTokens)
	}
	var (
		counted, usage = 0, -1
		trailer        metadata.MD
		recv           func() (tokens int, final int, err error)
	)
	rec.SentNS = now()
	if c.vllm {
		mt := uint32(req.MaxTokens)
		gr := &vllmpb.GenerateRequest{
			RequestId: req.ID, Input: &vllmpb.GenerateRequest_Text{Text: prompt}, Stream: true,
			SamplingParams: &vllmpb.SamplingParams{MaxTokens: &mt, IgnoreEos: true},
		}
		if ids != nil {
			gr.Input = &vllmpb.GenerateRequest_Tokenized{Tokenized: &vllmpb.TokenizedInput{InputIds: ids}}
		}
		s, err := c.eng.Generate(ctx, gr, grpc.Trailer(&trailer))
		if err != nil {
			c.fail(ctx, rec, now, err, nil)
			return
		}
		recv = func() (int, int, error) {
			m, err := s.Recv()
			if err != nil {
				return 0, -1, err
			}
			if ch := m.GetChunk(); ch != nil {
				return len(ch.TokenIds), -1, nil
			}
			if done := m.GetComplete(); done != nil {
				// proto3: an unset completion_tokens reads as 0, which
				// setOutput does not trust over streamed tokens.
				return 0, int(done.CompletionTokens), nil
			}
			return 0, -1, nil
		}
	} else {
		r := &llmv1.GenerateRequest{Model: req.Model, Prompt: prompt, PromptTokenIds: ids, MaxTokens: uint32(req.MaxTokens),
			RequestId: req.ID, Sampling: &llmv1.SamplingParams{IgnoreEos: true}}
		if req.SendPriority {
			r.Priority = int32(req.Priority)
		}
		s, err := c.llm.Generate(ctx, r, grpc.Trailer(&trailer))
		if err != nil {
			c.fail(ctx, rec, now, err, nil)
			return
		}
		recv = func() (int, int, error) {
			m, err := s.Recv()
			if err != nil {
				return 0, -1, err
			}
			final := -1
			if m.Usage != nil {
				final = int(m.Usage.CompletionTokens)
			}
			// An engine that falls behind sends several tokens in one
			// message: count its token ids, not messages (text without
			// ids is one token).
			n := len(m.TokenIds)
			if n == 0 && m.Text != "" {
				n = 1
			}
			return n, final, nil
		}
	}
	for {
		toks, final, err := recv()
		t := now()
		if errors.Is(err, io.EOF) {
			setOutput(rec, counted, usage)
			rec.DoneNS = t
			rec.Status = result.StatusOK
			rec.Engine = engineFromTrailer(trailer)
			readServerTiming(rec, trailer.Get("server-timing"))
			return
		}
		if err != nil {
			rec.OutputTokens = max(counted, usage)
			c.fail(ctx, rec, now, err, trailer)
			return
		}
		if final >= 0 {
			usage = final
		}
		if toks > 0 {
			if rec.FirstTokenNS == 0 {
				rec.FirstTokenNS = t
			}
			rec.ChunkNS = append(rec.ChunkNS, t)
			counted += toks
		}
	}
}

func (c *grpcClient) fail(ctx context.Context, rec *result.Record, now Clock, err error, trailer metadata.MD) {
	st, _ := status.FromError(err)
	code := st.Code()
	s := result.StatusError
	switch {
	case ctx.Err() != nil && (code == codes.Canceled || code == codes.DeadlineExceeded):
		s = ctxStatus(ctx)
	case code == codes.DeadlineExceeded:
		s = result.StatusTimeout
	case code == codes.ResourceExhausted && queueFull(first(trailer.Get("x-llmesh-reply")), st.Message()):
		s = result.StatusQueueFull
	case code == codes.ResourceExhausted:
		s = result.StatusRejected
	case code == codes.Unavailable && len(trailer.Get("grpc-retry-pushback-ms")) > 0,
		preemptedText(st.Message()):
		s = result.StatusPreempted
	}
	fail(rec, now, s, int(code), fmt.Sprintf("gRPC %s: %s", code, st.Message()))
}

// engineFromTrailer reads the sim's ground truth from trailing metadata.
func engineFromTrailer(md metadata.MD) *result.EngineTimes {
	get := func(k string) int64 {
		v := md.Get(k)
		if len(v) == 0 {
			return 0
		}
		n, _ := strconv.ParseInt(v[0], 10, 64)
		return n
	}
	e := &result.EngineTimes{
		ArrivalNS:        get("llmesh-engine-arrival-ns"),
		FirstScheduledNS: get("llmesh-engine-first-scheduled-ns"),
		FirstTokenNS:     get("llmesh-engine-first-token-ns"),
		FinishNS:         get("llmesh-engine-finish-ns"),
		Preemptions:      int(get("llmesh-engine-preemptions")),
	}
	if e.ArrivalNS == 0 && e.FirstTokenNS == 0 {
		return nil
	}
	return e
}

func first(vs []string) string {
	if len(vs) == 0 {
		return ""
	}
	return vs[0]
}
