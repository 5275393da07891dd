package gateway

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/llmesh/llmesh/api/llmv1"
	"github.com/llmesh/llmesh/exchange"
	"github.com/llmesh/llmesh/testkit/grpcframe"
)

func webMsg(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return grpcframe.Raw(0, b)
}

// startWebUpstream serves h over h2c on loopback, as an engine (or a
// gRPC-Web translating proxy) behind a gRPC pool would.
func startWebUpstream(t *testing.T, h http.HandlerFunc) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, Protocols: new(http.Protocols)}
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	return ln.Addr().String()
}

// TestGRPCWebThroughGateway: gRPC-Web calls pass the gateway byte for byte;
// binary gRPC-Web is observed as gRPC with its status from the trailer
// frame, gRPC-Web-text (base64) is counted as raw bytes, and a binary
// gRPC-Web response cut by the upstream ends with a trailer frame carrying
// UNAVAILABLE, since gRPC-Web has no HTTP trailers.
func TestGRPCWebThroughGateway(t *testing.T) {
	msgs := append(webMsg(t, &llmv1.GenerateResponse{TokenIds: []uint32{1}, Text: "a"}),
		webMsg(t, &llmv1.GenerateResponse{TokenIds: []uint32{2}, Text: "b", FinishReason: "length",
			Usage: &llmv1.Usage{PromptTokens: 1, CompletionTokens: 2, TotalTokens: 3}})...)
	first := msgs[:5+int(binary.BigEndian.Uint32(msgs[1:5]))]
	okTrailer := grpcframe.Raw(0x80, []byte("grpc-status: 0\r\ngrpc-message: \r\n"))
	text := base64.StdEncoding.EncodeToString(append(msgs, okTrailer...))
	gotBody := make(chan []byte, 1)
	up := startWebUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		gotBody <- b
		ct := r.Header.Get("Content-Type")
		w.Header().Set("Content-Type", ct)
		switch {
		case r.Header.Get("X-Cut") != "":
			w.Write(msgs[:len(first)+3]) // the first frame and part of the next
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler) // the upstream resets the stream
		case strings.HasPrefix(ct, "application/grpc-web-text"):
			io.WriteString(w, text)
		default:
			w.Write(msgs)
			w.(http.Flusher).Flush()
			w.Write(okTrailer)
		}
	})
	rec := newRecorder()
	_, gw := startGateway(t, Config{Pools: []Pool{{Name: "g", Protocol: GRPC, Upstream: up}}}, WithRecorder(rec))
	reqMsg := webMsg(t, &llmv1.GenerateRequest{Model: "m", Prompt: "hi", MaxTokens: 2, Priority: -5})
	call := func(ct string, body []byte, kv ...string) []byte {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, gw+llmv1.Generation_Generate_FullMethodName, bytes.NewReader(body))
		req.Header.Set("Content-Type", ct)
		for i := 0; i+1 < len(kv); i += 2 {
			req.Header.Set(kv[i], kv[i+1])
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("%s: reading: %v", ct, err)
		}
		if res.StatusCode != http.StatusOK {
			t.Fatalf("%s: status %d %s", ct, res.StatusCode, b)
		}
		return b
	}

	// Binary gRPC-Web: the priority guard reads its frames as gRPC's.
	b := call("application/grpc-web+proto", reqMsg)
	if !bytes.Equal(b, append(msgs, okTrailer...)) {
		t.Errorf("client got %q", b)
	}
	var sent llmv1.GenerateRequest
	if up := <-gotBody; len(up) < 5 || proto.Unmarshal(up[5:], &sent) != nil || sent.Priority != 0 || sent.Model != "m" {
		t.Errorf("upstream got %q (priority %d): want the model and no client priority", up, sent.Priority)
	}
	r := rec.next(t)
	if r.Protocol != exchange.ProtocolGRPC || !r.OK() || !r.Complete || !r.HasGRPCStatus || r.GRPCStatus != 0 ||
		r.OutputTokens != 2 || r.Model != "m" || r.Outcome.String() != "done" {
		t.Errorf("grpc-web record: protocol %v ok %v (%v %q) complete %v status %v/%d tokens %d model %q outcome %v",
			r.Protocol, r.OK(), r.ErrorKind, r.Error, r.Complete, r.HasGRPCStatus, r.GRPCStatus, r.OutputTokens, r.Model, r.Outcome)
	}

	// gRPC-Web-text: opaque both ways, and the guard cannot check a
	// generation's priority in it: refused unless the source is trusted.
	textReq := []byte(base64.StdEncoding.EncodeToString(reqMsg))
	req, _ := http.NewRequest(http.MethodPost, gw+llmv1.Generation_Generate_FullMethodName, bytes.NewReader(textReq))
	req.Header.Set("Content-Type", "application/grpc-web-text")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.Header.Get("Grpc-Status") != "3" || res.Header.Get("Content-Type") != "application/grpc-web-text" {
		t.Errorf("grpc-web-text generation: grpc-status %q content-type %q, want 3 (unchecked priority) as grpc-web-text",
			res.Header.Get("Grpc-Status"), res.Header.Get("Content-Type"))
	}
	if r := rec.next(t); r.ErrorKind != exchange.ErrorHTTPStatus {
		t.Errorf("refused grpc-web-text record: kind %v", r.ErrorKind)
	}
	// Another method is not guarded: it passes, counted as raw bytes.
	req, _ = http.NewRequest(http.MethodPost, gw+"/other.Service/Call", bytes.NewReader(textReq))
	req.Header.Set("Content-Type", "application/grpc-web-text")
	res, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(res.Body)
	res.Body.Close()
	if string(b) != text || string(<-gotBody) != string(textReq) {
		t.Errorf("grpc-web-text passed as %q", b)
	}
	r = rec.next(t)
	if r.Protocol != exchange.ProtocolRaw || !r.OK() || r.ResponseBytes != int64(len(text)) {
		t.Errorf("grpc-web-text record: protocol %v ok %v (%v %q) bytes %d", r.Protocol, r.OK(), r.ErrorKind, r.Error, r.ResponseBytes)
	}

	// Cut mid-stream: a trailer frame with UNAVAILABLE follows the whole
	// frames the client got.
	b = call("application/grpc-web", reqMsg, "X-Cut", "1")
	<-gotBody
	if !bytes.HasPrefix(b, first) || !bytes.Contains(b[len(first):], []byte("grpc-status: 14\r\n")) || b[len(first)] != 0x80 {
		t.Errorf("cut stream: client got %q, want the first frame then a trailer frame with status 14", b)
	}
	if r := rec.next(t); r.ErrorKind != exchange.ErrorUpstreamReset || !errors.Is(r.Err, ErrUpstreamReset) {
		t.Errorf("cut record: kind %v err %v, want an upstream reset", r.ErrorKind, r.Err)
	}
}
