package server

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/llmesh/llmesh/api/llmv1"
	"github.com/llmesh/llmesh/api/vllmpb"
	"github.com/llmesh/llmesh/sim"
)

// Trailing metadata keys carrying the engine's ground truth (Unix
// nanoseconds of the engine clock; 0 when it did not happen).
const (
	TrailerArrival        = "llmesh-engine-arrival-ns"
	TrailerFirstScheduled = "llmesh-engine-first-scheduled-ns"
	TrailerFirstToken     = "llmesh-engine-first-token-ns"
	TrailerFinish         = "llmesh-engine-finish-ns"
	TrailerPreemptions    = "llmesh-engine-preemptions"
)

func (r *result) trailer() metadata.MD {
	t := r.truth()
	return metadata.Pairs(
		TrailerArrival, strconv.FormatInt(t.ArrivalNs, 10),
		TrailerFirstScheduled, strconv.FormatInt(t.FirstScheduledNs, 10),
		TrailerFirstToken, strconv.FormatInt(t.FirstTokenNs, 10),
		TrailerFinish, strconv.FormatInt(t.FinishNs, 10),
		TrailerPreemptions, strconv.Itoa(t.Preemptions),
	)
}

// grpcFault reads the fault header from metadata or draws a random fault.
func (s *Server) grpcFault(ctx context.Context) (Fault, error) {
	var h string
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get(FaultHeader); len(v) > 0 {
			h = v[0]
		}
	}
	f, err := s.faults.draw(h)
	if err != nil {
		return f, status.Error(codes.InvalidArgument, FaultHeader+": "+err.Error())
	}
	if f.Status != 0 {
		return f, status.Error(httpToCode(f.Status), faultMessage(f.Status))
	}
	return f, nil
}

func httpToCode(st int) codes.Code {
	switch st {
	case http.StatusBadRequest:
		return codes.InvalidArgument
	case http.StatusNotFound:
		return codes.NotFound
	case http.StatusTooManyRequests:
		return codes.ResourceExhausted
	case http.StatusServiceUnavailable:
		return codes.Unavailable
	}
	return codes.Internal
}

// grpcError maps request and generation errors to a gRPC status.
func grpcError(ctx context.Context, err error) error {
	var re *requestError
	switch {
	case errors.As(err, &re):
		msg := re.Msg
		if re.Param != "" {
			msg = re.Param + ": " + msg
		}
		return status.Error(httpToCode(re.Status), msg)
	case errors.Is(err, errDropped):
		return status.Error(codes.Unavailable, err.Error())
	case ctx.Err() != nil:
		return status.FromContextError(ctx.Err()).Err()
	case errors.Is(err, errStopped):
		return status.Error(codes.Unavailable, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

func checkIDs(ids []uint32, field string) error {
	for i, id := range ids {
		if id >= sim.VocabSize {
			return badRequest(field, "%s[%d]: token id %d out of the vocabulary [0, %d)", field, i, id, sim.VocabSize)
		}
	}
	return nil
}

// generationService serves llm.v1.Generation.
type generationService struct {
	llmv1.UnimplementedGenerationServer
	s *Server
}

func (g *generationService) Generate(req *llmv1.GenerateRequest, out grpc.ServerStreamingServer[llmv1.GenerateResponse]) error {
	s, ctx := g.s, out.Context()
	fault, err := s.grpcFault(ctx)
	if err != nil {
		return err
	}
	ar := &apiRequest{model: req.GetModel(), maxTokens: int(req.GetMaxTokens()), priority: int(req.GetPriority())}
	if ids := req.GetPromptTokenIds(); len(ids) > 0 {
		if err := checkIDs(ids, "prompt_token_ids"); err != nil {
			return grpcError(ctx, err)
		}
		ar.prompt = ids
	} else {
		ar.prompt = sim.Tokenize(req.GetPrompt())
	}
	if sp := req.GetSampling(); sp != nil && sp.Seed != nil {
		seed := uint64(int64(sp.GetSeed()))
		ar.seed = &seed
	}
	gr, err := s.prepare(ar, fault)
	if err != nil {
		return grpcError(ctx, err)
	}
	var last []uint32
	res, err := s.generate(ctx, gr, func(ids []uint32, done bool) error {
		if done {
			last = ids // the last tokens go out with usage below
			return nil
		}
		return out.Send(&llmv1.GenerateResponse{TokenIds: ids, Text: sim.Detokenize(ids)})
	})
	if res != nil {
		out.SetTrailer(res.trailer())
	}
	if err != nil {
		return grpcError(ctx, err)
	}
	final := &llmv1.GenerateResponse{TokenIds: last, Text: sim.Detokenize(last), FinishReason: "length"}
	if !s.quirks.Has(QuirkGRPCNoUsage) {
		final.Usage = &llmv1.Usage{PromptTokens: uint32(len(gr.prompt)), CompletionTokens: uint32(len(res.ids)), TotalTokens: uint32(len(gr.prompt) + len(res.ids))}
	}
	return out.Send(final)
}

// vllmService serves vllm.grpc.engine.VllmEngine.
type vllmService struct {
	vllmpb.UnimplementedVllmEngineServer
	s *Server
}

func (v *vllmService) Generate(req *vllmpb.GenerateRequest, out grpc.ServerStreamingServer[vllmpb.GenerateResponse]) error {
	s, ctx := v.s, out.Context()
	fault, err := s.grpcFault(ctx)
	if err != nil {
		return err
	}
	ar := &apiRequest{}
	switch in := req.GetInput().(type) {
	case *vllmpb.GenerateRequest_Tokenized:
		ids := in.Tokenized.GetInputIds()
		if len(ids) == 0 {
			ids = sim.Tokenize(in.Tokenized.GetOriginalText())
		}
		if err := checkIDs(ids, "tokenized.input_ids"); err != nil {
			return grpcError(ctx, err)
		}
		ar.prompt = ids
	case *vllmpb.GenerateRequest_Text:
		ar.prompt = sim.Tokenize(in.Text)
	default:
		return status.Error(codes.InvalidArgument, "input: one of tokenized or text is required")
	}
	if sp := req.GetSamplingParams(); sp != nil {
		if sp.MaxTokens != nil {
			if sp.GetMaxTokens() == 0 {
				return status.Error(codes.InvalidArgument, "sampling_params.max_tokens: must be at least 1")
			}
			ar.maxTokens = int(sp.GetMaxTokens())
		}
		if sp.Seed != nil {
			seed := uint64(int64(sp.GetSeed()))
			ar.seed = &seed
		}
	}
	gr, err := s.prepare(ar, fault)
	if err != nil {
		return grpcError(ctx, err)
	}
	prompt := uint32(len(gr.prompt))
	total := uint32(0)
	noUsage := s.quirks.Has(QuirkGRPCNoUsage)
	res, err := s.generate(ctx, gr, func(ids []uint32, _ bool) error {
		total += uint32(len(ids))
		if !req.GetStream() {
			return nil
		}
		ch := &vllmpb.GenerateStreamChunk{TokenIds: ids, PromptTokens: prompt, CompletionTokens: total}
		if noUsage {
			ch.PromptTokens, ch.CompletionTokens = 0, 0
		}
		return out.Send(&vllmpb.GenerateResponse{Response: &vllmpb.GenerateResponse_Chunk{Chunk: ch}})
	})
	if res != nil {
		out.SetTrailer(res.trailer())
	}
	if err != nil {
		return grpcError(ctx, err)
	}
	done := &vllmpb.GenerateComplete{OutputIds: res.ids, FinishReason: "length", PromptTokens: prompt, CompletionTokens: uint32(len(res.ids))}
	if noUsage {
		done.PromptTokens, done.CompletionTokens = 0, 0
	}
	return out.Send(&vllmpb.GenerateResponse{Response: &vllmpb.GenerateResponse_Complete{Complete: done}})
}
