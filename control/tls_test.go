package control

import (
	"context"
	"crypto/tls"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	sotw "github.com/envoyproxy/go-control-plane/pkg/client/sotw/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/llmesh/llmesh/internal/tlsfiles"
	"github.com/llmesh/llmesh/internal/tlsfiles/tlstest"
)

func TestMTLS(t *testing.T) {
	pki := tlstest.New(t)
	tlsCfg, err := tlsfiles.Server(pki.ServerCert, pki.ServerKey, pki.CA)
	if err != nil {
		t.Fatal(err)
	}
	clientTLS := func(cert, key string) *tls.Config {
		c, err := tlsfiles.Client(pki.CA, cert, key, "")
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	p := startPlane(t, exampleYAML(t), tlsCfg)

	// A client with a certificate from the CA gets resources, here through
	// go-control-plane's own ADS client.
	good := credentials.NewTLS(clientTLS(pki.ClientCert, pki.ClientKey))
	conn, err := grpc.NewClient(p.xds, grpc.WithTransportCredentials(good))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	c := sotw.NewADSClient(ctx, &core.Node{Id: "envoy-mtls"}, resource.ListenerType)
	if err := c.InitConnect(conn); err != nil {
		t.Fatal(err)
	}
	r, err := c.Fetch()
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Resources) != 1 {
		t.Fatalf("listeners over mTLS: %d", len(r.Resources))
	}
	if err := c.Ack(); err != nil {
		t.Fatal(err)
	}

	// Without a client certificate, or with one from another CA, the
	// handshake fails and no stream opens.
	for name, cfg := range map[string]*tls.Config{
		"no client cert": clientTLS("", ""),
		"foreign CA":     clientTLS(pki.RogueCert, pki.RogueKey),
	} {
		conn, err := grpc.NewClient(p.xds, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
		if err != nil {
			t.Fatal(err)
		}
		c := sotw.NewADSClient(ctx, &core.Node{Id: "intruder"}, resource.ListenerType)
		err = c.InitConnect(conn)
		if err == nil {
			_, err = c.Fetch()
		}
		conn.Close()
		if err == nil {
			t.Errorf("%s: fetched resources", name)
		}
	}
	for _, n := range p.srv.Nodes() {
		if n.ID == "intruder" {
			t.Error("an unauthenticated node reached the xDS server")
		}
	}
}
