package gateway

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/llmesh/llmesh/api/llmv1"
	"github.com/llmesh/llmesh/exchange"
	"github.com/llmesh/llmesh/testkit/grpcframe"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// genServer streams n responses and engine timestamps in the trailer.
type genServer struct {
	llmv1.UnimplementedGenerationServer
	n   int
	gap time.Duration
}

func (s *genServer) Generate(req *llmv1.GenerateRequest, st grpc.ServerStreamingServer[llmv1.GenerateResponse]) error {
	for i := 0; i < s.n; i++ {
		if s.gap > 0 {
			time.Sleep(s.gap)
		}
		if err := st.Send(&llmv1.GenerateResponse{TokenIds: []uint32{uint32(i)}, Text: "t"}); err != nil {
			return err
		}
	}
	if err := st.Send(&llmv1.GenerateResponse{FinishReason: "length",
		Usage: &llmv1.Usage{PromptTokens: 2, CompletionTokens: uint32(s.n), TotalTokens: uint32(s.n + 2)}}); err != nil {
		return err
	}
	st.SetTrailer(metadata.Pairs("llmesh-engine-first-token-ns", "1700000000000000000"))
	return nil
}

func startGRPC(t testing.TB, srv llmv1.GenerationServer) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	llmv1.RegisterGenerationServer(s, srv)
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(s.Stop)
	return ln.Addr().String()
}

func grpcClient(t testing.TB, gw string) llmv1.GenerationClient {
	t.Helper()
	cc, err := grpc.NewClient(strings.TrimPrefix(gw, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return llmv1.NewGenerationClient(cc)
}

func TestGRPCStreamingPassesWithTrailers(t *testing.T) {
	up := startGRPC(t, &genServer{n: 6})
	rec := newRecorder()
	_, gw := startGateway(t, Config{Pools: []Pool{{Name: "g", Protocol: GRPC, Upstream: up}}, ServerTiming: true}, WithRecorder(rec))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := grpcClient(t, gw).Generate(ctx, &llmv1.GenerateRequest{Model: "m", Prompt: "hello", MaxTokens: 6})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		_, err := st.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("Recv: %v", err)
		}
		n++
	}
	if n != 7 {
		t.Errorf("got %d messages, want 7", n)
	}
	tr := st.Trailer()
	if got := tr.Get("llmesh-engine-first-token-ns"); len(got) != 1 {
		t.Errorf("engine trailer lost: %v", tr)
	}
	if got := tr.Get("server-timing"); len(got) != 1 || !strings.Contains(got[0], "ttft;dur=") {
		t.Errorf("server-timing trailer = %v", got)
	}
	r := rec.next(t)
	if !r.OK() || r.OutputTokens != 6 || r.Protocol != exchange.ProtocolGRPC || !r.Engine.Seen {
		t.Errorf("observation ok=%v err=%q tokens=%d proto=%v engine=%v", r.OK(), r.Error, r.OutputTokens, r.Protocol, r.Engine.Seen)
	}
}

// h2cUpstream serves handler over cleartext HTTP/2 (what gRPC clients
// speak), so a test can misbehave below the gRPC library.
func h2cUpstream(t testing.TB, handler http.HandlerFunc) string {
	t.Helper()
	srv := httptest.NewUnstartedServer(handler)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestGRPCUpstreamDiesMidStream(t *testing.T) {
	up := h2cUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/grpc")
		w.WriteHeader(http.StatusOK)
		for i := 0; i < 2; i++ {
			_, _ = w.Write(grpcframe.Message(&llmv1.GenerateResponse{TokenIds: []uint32{1}, Text: "a"}))
		}
		// Half a frame, then the stream is reset.
		f := grpcframe.Message(&llmv1.GenerateResponse{TokenIds: []uint32{1}, Text: "a"})
		_, _ = w.Write(f[:4])
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	})
	rec := newRecorder()
	_, gw := startGateway(t, Config{Pools: []Pool{{Name: "g", Protocol: GRPC, Upstream: up}}}, WithRecorder(rec))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := grpcClient(t, gw).Generate(ctx, &llmv1.GenerateRequest{Prompt: "x"})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		_, err = st.Recv()
		if err != nil {
			break
		}
		n++
	}
	if n != 2 || status.Code(err) != codes.Unavailable || !strings.Contains(status.Convert(err).Message(), "upstream reset") {
		t.Fatalf("got %d messages then %v, want 2 then UNAVAILABLE upstream reset", n, err)
	}
	r := rec.next(t)
	if r.ErrorKind != exchange.ErrorUpstreamReset || r.TokenChunks != 2 {
		t.Errorf("observation kind %v (%q) chunks %d", r.ErrorKind, r.Error, r.TokenChunks)
	}
}

func TestGRPCOversizedIsResourceExhausted(t *testing.T) {
	up := startGRPC(t, &genServer{n: 1})
	_, gw := startGateway(t, Config{Pools: []Pool{{Name: "g", Protocol: GRPC, Upstream: up}}, MaxRequestBytes: 100})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := grpcClient(t, gw).Generate(ctx, &llmv1.GenerateRequest{Prompt: strings.Repeat("x", 200)})
	if err == nil {
		_, err = st.Recv()
	}
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "max_request_bytes") {
		t.Fatalf("got %v, want RESOURCE_EXHAUSTED naming max_request_bytes", err)
	}
}

func TestGRPCFrameLengthLies(t *testing.T) {
	up := h2cUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/grpc")
		w.Header().Set("Trailer", "Grpc-Status")
		_, _ = w.Write(grpcframe.Message(&llmv1.GenerateResponse{TokenIds: []uint32{1}}))
		_, _ = w.Write([]byte{0, 0x7f, 0xff, 0xff, 0xff, 1, 2, 3}) // claims 2 GiB, sends 3 bytes
		w.Header().Set("Grpc-Status", "0")
	})
	rec := newRecorder()
	_, gw := startGateway(t, Config{Pools: []Pool{{Name: "g", Protocol: GRPC, Upstream: up}}}, WithRecorder(rec))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := grpcClient(t, gw).Generate(ctx, &llmv1.GenerateRequest{Prompt: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatalf("first message: %v", err)
	}
	if _, err := st.Recv(); err == nil {
		t.Fatal("a frame claiming 2 GiB decoded")
	}
	r := rec.next(t)
	if r.OK() || r.TokenChunks != 1 {
		t.Errorf("record ok=%v kind=%v chunks=%d, want a failure after 1 message", r.OK(), r.ErrorKind, r.TokenChunks)
	}
}
