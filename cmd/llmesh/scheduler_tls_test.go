package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/internal/tlsfiles/tlstest"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/client"
	"github.com/llmesh/llmesh/testkit/proctest"
)

// scheduler serve with --tls-cert, --tls-key and --client-ca admits a host
// whose mesh names its certificate under scheduler_service.tls, and no
// plaintext client.
func TestSchedulerServeMutualTLS(t *testing.T) {
	pki := tlstest.New(t)
	mesh := "pools:\n  - {name: gpu, protocol: openai, endpoints: [127.0.0.1:1], capacity: {max_inflight: 2}}\n" +
		"classes:\n  - {name: default, priority: 0}\n"
	path := proctest.WriteTemp(t, "mesh.yaml", mesh)
	s := serve(t, "scheduler", "serve", "--listen", "127.0.0.1:0", "--config", path,
		"--tls-cert", pki.ServerCert, "--tls-key", pki.ServerKey, "--client-ca", pki.CA)
	addr := proctest.WaitMatch(t, &s.stdout, schedulerListeningRE, s)[1]
	host, err := config.Load([]byte(mesh + fmt.Sprintf("scheduler_service:\n  address: %s\n  failure_mode: fail_closed\n  tls: {ca_file: %s, cert_file: %s, key_file: %s}\n",
		addr, pki.CA, pki.ClientCert, pki.ClientKey)))
	if err != nil {
		t.Fatal(err)
	}
	tlsCfg, err := host.SchedulerService.ServiceTLS()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, o := range []client.Options{{TLS: tlsCfg}, {}} {
		c, err := client.New(addr, o)
		if err != nil {
			t.Fatal(err)
		}
		l, err := c.Admit(ctx, scheduler.Request{Pool: "gpu"})
		switch {
		case o.TLS != nil && err != nil:
			t.Errorf("with the mesh's certificate: %v", err)
		case o.TLS == nil && !errors.Is(err, scheduler.ErrUnavailable):
			t.Errorf("plaintext: %v, want %v", err, scheduler.ErrUnavailable)
		}
		if l != nil {
			l.Release(scheduler.Done)
		}
		c.Close()
	}
	if err := s.Stop(); err != nil {
		t.Fatalf("serve: %v", err)
	}
	wantUsage(t, mainErr("scheduler", "serve", "--config", path, "--tls-cert", pki.ServerCert, "--max-sessions", "0"),
		"--tls-cert, --tls-key, --client-ca: tls: server key file is required", "--max-sessions: 0 must be at least 1")
	if _, err := config.Load([]byte(mesh + "scheduler_service:\n  address: 127.0.0.1:9\n  tls: {cert_file: c.pem}\n")); err == nil ||
		!strings.Contains(err.Error(), "scheduler_service.tls.key_file") {
		t.Errorf("a client certificate without its key: %v", err)
	}
}
