package server_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/llmesh/llmesh/internal/tlsfiles"
	"github.com/llmesh/llmesh/internal/tlsfiles/tlstest"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/client"
	"github.com/llmesh/llmesh/scheduler/server"
)

// With TLS and a client CA, both transports admit a client holding a
// certificate the CA signed, and nobody else: not a plaintext client, not
// one without a certificate, not one with another CA's.
func TestServiceMutualTLS(t *testing.T) {
	pki := tlstest.New(t)
	srvTLS, err := tlsfiles.Server(pki.ServerCert, pki.ServerKey, pki.CA)
	if err != nil {
		t.Fatal(err)
	}
	addr, stop := startWith(t, server.Options{TLS: srvTLS})
	defer stop()
	good, err := tlsfiles.Client(pki.CA, pki.ClientCert, pki.ClientKey, "")
	if err != nil {
		t.Fatal(err)
	}
	noCert, _ := tlsfiles.Client(pki.CA, "", "", "")
	rogue, _ := tlsfiles.Client(pki.CA, pki.RogueCert, pki.RogueKey, "")
	admit := func(t *testing.T, transport string, o client.Options) error {
		o.Transport, o.Timeout = transport, 2*time.Second
		c, err := client.New(addr, o)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		l, err := c.Admit(ctx, scheduler.Request{Pool: "gpu", Class: "default", PromptTokens: 1, MaxTokens: 1})
		if err == nil {
			l.Release(scheduler.Done)
		}
		return err
	}
	for _, tr := range []string{client.TransportFramed, client.TransportGRPC} {
		t.Run(tr, func(t *testing.T) {
			if err := admit(t, tr, client.Options{TLS: good}); err != nil {
				t.Fatalf("client with a certificate: %v", err)
			}
			for name, o := range map[string]client.Options{"plaintext": {}, "no certificate": {TLS: noCert}, "another CA": {TLS: rogue}} {
				if err := admit(t, tr, o); !errors.Is(err, scheduler.ErrUnavailable) {
					t.Errorf("%s: %v, want %v", name, err, scheduler.ErrUnavailable)
				}
			}
		})
	}
}
