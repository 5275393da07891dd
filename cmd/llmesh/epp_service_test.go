package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/llmesh/llmesh/epp/epptest"
	"github.com/llmesh/llmesh/internal/tlsfiles/tlstest"
)

// llmesh epp dials the shared scheduler service with scheduler_service's
// TLS and token, as the gateway and the Envoy filter do: against a service
// over TLS that knows clients only by token, the picker admits with the
// token and is refused without it, on both transports, with an answer
// that says why.
func TestEPPSchedulerServiceToken(t *testing.T) {
	pki := tlstest.New(t)
	base, err := os.ReadFile("../../epp/testdata/mesh.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name, data string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	token := write("epp.token", "epp-secret-token\n")
	ids := write("identities.yaml", "identities:\n  - name: picker\n    token_files: [epp.token]\n")
	svc := serve(t, "scheduler", "serve", "--listen", "127.0.0.1:0", "--config", write("service.yaml", string(base)),
		"--tls-cert", pki.ServerCert, "--tls-key", pki.ServerKey, "--identities", ids)
	svcAddr := waitLine(t, svc, regexp.MustCompile(`scheduler service listening on (\S+)`))
	req := epptest.Request{Headers: map[string]string{":method": "POST", ":path": "/v1/completions"},
		Chunks: [][]byte{[]byte(`{"model":"m","prompt":"hi","max_tokens":4}`)}}
	for _, transport := range []string{"framed", "grpc"} {
		for _, withToken := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/token=%v", transport, withToken), func(t *testing.T) {
				// With the token, fail_closed: a pick proves the service
				// admitted it. Without, fail_open: a refusal must not be
				// taken for an unreachable service.
				mode := "fail_open"
				if withToken {
					mode = "fail_closed"
				}
				shared := fmt.Sprintf("%sscheduler_service:\n  address: %s\n  failure_mode: %s\n  timeout: 2s\n  transport: %s\n  tls: {ca_file: %s}\n",
					base, svcAddr, mode, transport, pki.CA)
				if withToken {
					shared += "  token_file: " + token + "\n"
				}
				s := serve(t, "epp", "--config", write("epp.yaml", shared), "--listen", "127.0.0.1:0", "--drain", "1s")
				conn, err := grpc.NewClient(eppAddr(t, s), grpc.WithTransportCredentials(insecure.NewCredentials()))
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				d := &epptest.Driver{Client: extprocv3.NewExternalProcessorClient(conn), RequestMode: epptest.FullDuplex, ResponseMode: epptest.FullDuplex}
				call, pick, err := d.Start(ctx, req)
				if err != nil {
					t.Fatal(err)
				}
				if withToken {
					if pick.Header == "" || pick.Immediate != nil {
						t.Fatalf("with the token: %+v", pick)
					}
					if _, err := call.Respond(epptest.Response{Status: 200}); err != nil {
						t.Fatal(err)
					}
				} else {
					// Refused, not failed open: an unauthenticated picker
					// must not admit on its own.
					im := pick.Immediate
					if im == nil || im.GetStatus().GetCode() != 503 || !strings.Contains(string(im.GetBody()), "Unauthenticated") ||
						!strings.Contains(string(im.GetBody()), "matches no identity") {
						t.Fatalf("without the token: %+v, want a 503 that names the refusal", pick)
					}
				}
				conn.Close()
				if err := s.Stop(); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}
