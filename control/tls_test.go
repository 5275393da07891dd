package control

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	sotw "github.com/envoyproxy/go-control-plane/pkg/client/sotw/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// testPKI is a CA with a server and a client certificate, written as PEM
// files.
type testPKI struct {
	dir                  string
	caPool               *x509.CertPool
	client               tls.Certificate
	rogue                tls.Certificate // client cert from another CA
	serverPEM, serverKey string
	caPEM                string
}

func newPKI(t *testing.T) *testPKI {
	t.Helper()
	p := &testPKI{dir: t.TempDir(), caPool: x509.NewCertPool()}
	ca, caKey := makeCert(t, nil, nil, "llmesh test CA", true)
	p.caPool.AddCert(ca)
	p.caPEM = p.write(t, "ca.pem", "CERTIFICATE", ca.Raw)
	srv, srvKey := makeCert(t, ca, caKey, "control", false)
	p.serverPEM = p.write(t, "server.pem", "CERTIFICATE", srv.Raw)
	kb, err := x509.MarshalECPrivateKey(srvKey)
	if err != nil {
		t.Fatal(err)
	}
	p.serverKey = p.write(t, "server-key.pem", "EC PRIVATE KEY", kb)
	cl, clKey := makeCert(t, ca, caKey, "envoy", false)
	p.client = tls.Certificate{Certificate: [][]byte{cl.Raw}, PrivateKey: clKey}
	other, otherKey := makeCert(t, nil, nil, "rogue CA", true)
	rg, rgKey := makeCert(t, other, otherKey, "rogue", false)
	p.rogue = tls.Certificate{Certificate: [][]byte{rg.Raw}, PrivateKey: rgKey}
	return p
}

func (p *testPKI) write(t *testing.T, name, typ string, der []byte) string {
	t.Helper()
	path := filepath.Join(p.dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// makeCert makes a CA (self-signed when parent is nil) or a leaf valid for
// 127.0.0.1 as server and client.
func makeCert(t *testing.T, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, cn string, isCA bool) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
	}
	if isCA {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		tmpl.KeyUsage = x509.KeyUsageCertSign
	} else {
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	}
	signer, signerKey := tmpl, key
	if parent != nil {
		signer, signerKey = parent, parentKey
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, &key.PublicKey, signerKey)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c, key
}

func TestMTLS(t *testing.T) {
	pki := newPKI(t)
	tlsCfg, err := ServerTLS(pki.serverPEM, pki.serverKey, pki.caPEM)
	if err != nil {
		t.Fatal(err)
	}
	p := startPlane(t, exampleYAML(t), tlsCfg)

	// A client with a certificate from the CA gets resources, here through
	// go-control-plane's own ADS client.
	good := credentials.NewTLS(&tls.Config{RootCAs: pki.caPool, Certificates: []tls.Certificate{pki.client}})
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
		"no client cert": {RootCAs: pki.caPool},
		"foreign CA":     {RootCAs: pki.caPool, Certificates: []tls.Certificate{pki.rogue}},
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

func TestServerTLSErrors(t *testing.T) {
	_, err := ServerTLS("", "", "")
	if err == nil || !strings.Contains(err.Error(), "certificate file is required") || !strings.Contains(err.Error(), "key file is required") {
		t.Errorf("err = %v", err)
	}
	pki := newPKI(t)
	_, err = ServerTLS(pki.serverPEM, pki.serverKey, pki.serverKey)
	if err == nil || !strings.Contains(err.Error(), "no PEM certificates") {
		t.Errorf("key as CA: err = %v", err)
	}
}
