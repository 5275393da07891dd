// Package tlstest writes a test PKI as PEM files: a CA, a server and a
// client certificate signed by it (both valid for 127.0.0.1 and
// localhost), and a client certificate from another CA.
package tlstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// PKI is the files' paths.
type PKI struct {
	CA                    string
	ServerCert, ServerKey string
	ClientCert, ClientKey string
	// RogueCert and RogueKey are a client certificate another CA signed.
	RogueCert, RogueKey string
}

// New writes a PKI into a temporary directory of t.
func New(t testing.TB) *PKI {
	t.Helper()
	dir := t.TempDir()
	write := func(name, typ string, der []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	key := func(name string, k *ecdsa.PrivateKey) string {
		b, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return write(name, "EC PRIVATE KEY", b)
	}
	p := &PKI{}
	ca, caKey := cert(t, nil, nil, "llmesh test CA", true)
	p.CA = write("ca.pem", "CERTIFICATE", ca.Raw)
	srv, srvKey := cert(t, ca, caKey, "server", false)
	p.ServerCert, p.ServerKey = write("server.pem", "CERTIFICATE", srv.Raw), key("server-key.pem", srvKey)
	cl, clKey := cert(t, ca, caKey, "client", false)
	p.ClientCert, p.ClientKey = write("client.pem", "CERTIFICATE", cl.Raw), key("client-key.pem", clKey)
	other, otherKey := cert(t, nil, nil, "rogue CA", true)
	rg, rgKey := cert(t, other, otherKey, "rogue", false)
	p.RogueCert, p.RogueKey = write("rogue.pem", "CERTIFICATE", rg.Raw), key("rogue-key.pem", rgKey)
	return p
}

// cert makes a CA (self-signed when parent is nil) or a leaf valid for
// 127.0.0.1 and localhost as server and client.
func cert(t testing.TB, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, cn string, isCA bool) (*x509.Certificate, *ecdsa.PrivateKey) {
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
		tmpl.DNSNames = []string{"localhost"}
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
