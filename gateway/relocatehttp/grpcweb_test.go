package relocatehttp

import (
	"bytes"
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/llmesh/llmesh/api/llmv1"
	"github.com/llmesh/llmesh/exchange/relocate"
	"github.com/llmesh/llmesh/testkit/grpcframe"
)

// TestGRPCWebKinds: binary gRPC-Web has gRPC's framing, so its prompt is
// relocated as gRPC's; gRPC-Web-text (base64) is not decoded and passes
// as it is, without being refused or read as JSON.
func TestGRPCWebKinds(t *testing.T) {
	rel, err := relocate.Compile(relocate.Config{GRPC: []relocate.GRPCRule{{Method: "/llm.v1.Generation/Generate",
		Key: "x-prompt-raw", Field: 2, Threshold: relocate.Threshold{Bytes: 1}, Max: 1 << 20}}})
	if err != nil {
		t.Fatal(err)
	}
	type got struct {
		body   []byte
		header string
	}
	seen := make(chan got, 1)
	mw := New(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		seen <- got{b, r.Header.Get("X-Prompt-Raw")}
	}), rel, Options{})
	msg := grpcframe.Message(&llmv1.GenerateRequest{Model: "m", MaxTokens: 1})
	serve := func(ct string, body []byte) (*httptest.ResponseRecorder, got) {
		req := httptest.NewRequest(http.MethodPost, "/llm.v1.Generation/Generate", bytes.NewReader(body))
		req.Header.Set("Content-Type", ct)
		req.Header.Set("X-Prompt-Raw", "a prompt from metadata")
		w := httptest.NewRecorder()
		mw.ServeHTTP(w, req)
		select {
		case g := <-seen:
			return w, g
		default:
			return w, got{}
		}
	}

	w, g := serve("application/grpc-web+proto", msg)
	var up llmv1.GenerateRequest
	if w.Code != 200 || len(g.body) < 5 || proto.Unmarshal(g.body[5:], &up) != nil || up.Prompt != "a prompt from metadata" || g.header != "" {
		t.Errorf("grpc-web: status %d, prompt %q, header %q: want the prompt relocated into the message", w.Code, up.Prompt, g.header)
	}

	text := []byte(base64.StdEncoding.EncodeToString(msg))
	w, g = serve("application/grpc-web-text", text)
	if w.Code != 200 || !bytes.Equal(g.body, text) || g.header != "a prompt from metadata" {
		t.Errorf("grpc-web-text: status %d, body %q, header %q: want it passed as it is", w.Code, g.body, g.header)
	}
}
