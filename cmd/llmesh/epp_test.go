package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/llmesh/llmesh/epp/epptest"
	"github.com/llmesh/llmesh/internal/tlsfiles"
	"github.com/llmesh/llmesh/internal/tlsfiles/tlstest"
)

func TestEPPFlagErrorsAllAtOnce(t *testing.T) {
	wantUsage(t, mainErr("epp", "--tls-cert", "c.pem", "--max-body", "-1", "--body-mode", "fast", "--drain", "-1s", "--admin", "x", "extra"),
		"unexpected arguments", "--config: required", "--listen: required", "--tls-cert and --tls-key", "--max-body", "--body-mode", "--drain", "--admin")
	wantUsage(t, mainErr("epp", "--config", "../../epp/testdata/mesh.yaml", "--listen", "nocolon"), "--listen")
	wantUsage(t, mainErr("epp", "--config", "../../epp/testdata/mesh.yaml", "--listen", "127.0.0.1:0", "--listener", "nope"), "Listener", "nope")
}

var eppAddrRE = regexp.MustCompile(`epp listening on (\S+) \((plaintext|TLS)\)`)

// eppAddr waits for the command's listening line.
func eppAddr(t *testing.T, s *serving) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if m := eppAddrRE.FindStringSubmatch(s.stdout.String()); m != nil {
			return m[1]
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("no listening line in %q", s.stdout.String())
	return ""
}

// llmesh epp serves health and picks among the mesh file's endpoints,
// in plaintext and over TLS.
func TestEPPServes(t *testing.T) {
	pki := tlstest.New(t)
	clientTLS, err := tlsfiles.Client(pki.CA, "", "", "localhost")
	if err != nil {
		t.Fatal(err)
	}
	for _, useTLS := range []bool{false, true} {
		name := "plaintext"
		args := []string{"epp", "--config", "../../epp/testdata/mesh.yaml", "--listen", "127.0.0.1:0", "--drain", "1s"}
		creds := insecure.NewCredentials()
		if !useTLS {
			args = append(args, "--admin", "127.0.0.1:0")
		}
		if useTLS {
			name = "tls"
			args = append(args, "--tls-cert", pki.ServerCert, "--tls-key", pki.ServerKey)
			creds = credentials.NewTLS(clientTLS)
		}
		t.Run(name, func(t *testing.T) {
			s := serve(t, args...)
			addr := eppAddr(t, s)
			conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			hr, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "readiness"})
			if err != nil || hr.GetStatus() != healthpb.HealthCheckResponse_SERVING {
				t.Fatalf("readiness: %v %v", hr, err)
			}
			d := &epptest.Driver{Client: extprocv3.NewExternalProcessorClient(conn), RequestMode: epptest.FullDuplex, ResponseMode: epptest.FullDuplex}
			call, pick, err := d.Start(ctx, epptest.Request{Headers: map[string]string{":method": "POST", ":path": "/v1/completions"},
				Chunks: [][]byte{[]byte(`{"model":"m","prompt":"hi","max_tokens":4}`)}})
			if err != nil {
				t.Fatal(err)
			}
			if pick.Header != "10.0.0.1:8000" && pick.Header != "10.0.0.2:8000" || pick.Metadata != pick.Header {
				t.Fatalf("pick %+v", pick)
			}
			if _, err := call.Respond(epptest.Response{Status: 200}); err != nil {
				t.Fatal(err)
			}
			if !useTLS {
				// The request is in the admin's metrics, with its class and
				// the pool's gauges.
				admin := waitLine(t, s, regexp.MustCompile(`epp admin on (\S+)`))
				resp, err := http.Get(admin)
				if err != nil {
					t.Fatal(err)
				}
				m, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				for _, want := range []string{`llmesh_requests_total{`, `llmesh_class="interactive"`, `llmesh_scheduler_`} {
					if !strings.Contains(string(m), want) {
						t.Errorf("/metrics has no %s:\n%.2000s", want, m)
					}
				}
			}
			// A buffered body comes in one message, larger than gRPC's
			// default 4 MiB limit.
			big := `{"model":"m","prompt":"` + strings.Repeat("x", 5<<20) + `","max_tokens":1}`
			d.RequestMode, d.ResponseMode = epptest.Buffered, epptest.Buffered
			call, pick, err = d.Start(ctx, epptest.Request{Headers: map[string]string{":method": "POST", ":path": "/v1/completions"},
				Chunks: [][]byte{[]byte(big)}})
			if err != nil || pick.Header == "" {
				t.Fatalf("5 MiB buffered body: %v %+v", err, pick)
			}
			if _, err := call.Respond(epptest.Response{Status: 200}); err != nil {
				t.Fatal(err)
			}
			conn.Close()
			if err := s.Stop(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// With scheduler_service in the mesh file, llmesh epp admits through the
// shared service: picks while it runs; fail closed (503) once it is gone.
func TestEPPSharedScheduler(t *testing.T) {
	base, err := os.ReadFile("../../epp/testdata/mesh.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	svcMesh := filepath.Join(dir, "service.yaml")
	if err := os.WriteFile(svcMesh, base, 0o600); err != nil {
		t.Fatal(err)
	}
	svc := serve(t, "scheduler", "serve", "--listen", "127.0.0.1:0", "--config", svcMesh)
	svcAddr := waitLine(t, svc, regexp.MustCompile(`scheduler service listening on (\S+)`))
	eppMesh := filepath.Join(dir, "epp.yaml")
	shared := string(base) + "scheduler_service:\n  address: " + svcAddr + "\n  failure_mode: fail_closed\n  timeout: 300ms\n"
	if err := os.WriteFile(eppMesh, []byte(shared), 0o600); err != nil {
		t.Fatal(err)
	}
	s := serve(t, "epp", "--config", eppMesh, "--listen", "127.0.0.1:0", "--drain", "1s")
	conn, err := grpc.NewClient(eppAddr(t, s), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	d := &epptest.Driver{Client: extprocv3.NewExternalProcessorClient(conn), RequestMode: epptest.FullDuplex, ResponseMode: epptest.FullDuplex}
	req := epptest.Request{Headers: map[string]string{":method": "POST", ":path": "/v1/completions"},
		Chunks: [][]byte{[]byte(`{"model":"m","prompt":"hi","max_tokens":4}`)}}
	call, pick, err := d.Start(ctx, req)
	if err != nil || pick.Header == "" {
		t.Fatalf("through the shared service: %v %+v", err, pick)
	}
	if _, err := call.Respond(epptest.Response{Status: 200}); err != nil {
		t.Fatal(err)
	}
	if err := svc.Stop(); err != nil {
		t.Fatal(err)
	}
	// Gone: fail closed answers 503 (the client may need a moment to
	// notice the connection went away).
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, pick, err := d.Start(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if pick.Immediate != nil && pick.Immediate.GetStatus().GetCode() == 503 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still picking with the shared service gone: %+v", pick)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitLine waits for re in the command's stdout and returns its group.
func waitLine(t *testing.T, s *serving, re *regexp.Regexp) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if m := re.FindStringSubmatch(s.stdout.String()); m != nil {
			return m[1]
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("no %v in %q", re, s.stdout.String())
	return ""
}

// llmesh epp relocates prompts per the mesh file's relocation section and
// counts them in the admin's metrics, as the other hosts do.
func TestEPPRelocationMetrics(t *testing.T) {
	s := serve(t, "epp", "--config", "../../epp/testdata/mesh-relocation.yaml", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--drain", "1s")
	conn, err := grpc.NewClient(eppAddr(t, s), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d := &epptest.Driver{Client: extprocv3.NewExternalProcessorClient(conn), RequestMode: epptest.FullDuplex, ResponseMode: epptest.FullDuplex}
	const prompt = "a prompt long enough to move into the body"
	call, pick, err := d.Start(ctx, epptest.Request{Headers: map[string]string{":method": "POST", ":path": "/v1/completions",
		"content-type": "application/json", "x-prompt": prompt}, Chunks: [][]byte{[]byte(`{"model":"m","max_tokens":4}`)}})
	if err != nil || pick.Immediate != nil {
		t.Fatalf("%v %+v", err, pick.Immediate)
	}
	if !strings.Contains(string(pick.Body), `"prompt":"`+prompt+`"`) {
		t.Errorf("forwarded %s, want the prompt in the body", pick.Body)
	}
	if _, err := call.Respond(epptest.Response{Status: 200}); err != nil {
		t.Fatal(err)
	}
	admin := waitLine(t, s, regexp.MustCompile(`epp admin on (\S+)`))
	resp, err := http.Get(admin)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`llmesh_relocations_total{llmesh_relocation_protocol="http"`, `llmesh_relocated_bytes_total{llmesh_relocation_protocol="http"`} {
		if !strings.Contains(string(m), want) {
			t.Errorf("/metrics has no %s:\n%.3000s", want, m)
		}
	}
	conn.Close()
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
}
