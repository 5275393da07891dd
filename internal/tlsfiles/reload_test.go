package tlsfiles_test

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"io"
	"os"
	"testing"
	"time"

	"github.com/llmesh/llmesh/internal/tlsfiles"
	"github.com/llmesh/llmesh/internal/tlsfiles/tlstest"
)

// echo serves cfg on loopback, echoing lines, until the test ends.
func echo(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	l, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return l.Addr().String()
}

// dial connects with a client trusting cas and presenting cert/key (none
// when empty), and sends a line through.
func dial(t *testing.T, addr string, cas []string, cert, key string) (*tls.Conn, error) {
	t.Helper()
	roots := x509.NewCertPool()
	for _, ca := range cas {
		b, err := os.ReadFile(ca)
		if err != nil {
			t.Fatal(err)
		}
		roots.AppendCertsFromPEM(b)
	}
	cfg := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	if cert != "" {
		c, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{c}
	}
	c, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		return nil, err
	}
	// TLS 1.3 reports a refused client certificate at the first read.
	if _, err := c.Write([]byte("hello\n")); err != nil {
		c.Close()
		return nil, err
	}
	if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// replace writes src's content over dst with a later modification time.
func replace(t *testing.T, dst, src string, at time.Time) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(dst, at, at); err != nil {
		t.Fatal(err)
	}
}

// serial is the server certificate's serial number.
func serial(c *tls.Conn) string { return c.ConnectionState().PeerCertificates[0].SerialNumber.String() }

// Rotating the certificate and key on disk: the next handshake gets the new
// certificate (not before both files are written), a connection made
// before keeps working, and a rotated client CA admits the clients it
// signs and no longer the old CA's.
func TestServerReloadsRotatedFiles(t *testing.T) {
	old, rotated := tlstest.New(t), tlstest.New(t)
	// The server's files are copies, rotated in place.
	dir := t.TempDir()
	cert, key, ca := dir+"/server.pem", dir+"/server-key.pem", dir+"/ca.pem"
	t0 := time.Now().Add(-time.Minute)
	replace(t, cert, old.ServerCert, t0)
	replace(t, key, old.ServerKey, t0)
	replace(t, ca, old.CA, t0)
	cfg, err := tlsfiles.Server(cert, key, ca)
	if err != nil {
		t.Fatal(err)
	}
	addr := echo(t, cfg)
	both := []string{old.CA, rotated.CA}
	before, err := dial(t, addr, both, old.ClientCert, old.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	defer before.Close()
	oldSerial := serial(before)

	// The certificate alone: it does not match the key in use, so the old
	// pair stays.
	replace(t, cert, rotated.ServerCert, t0.Add(time.Second))
	c, err := dial(t, addr, both, old.ClientCert, old.ClientKey)
	if err != nil {
		t.Fatalf("handshake with the certificate rotated and the key not yet: %v", err)
	}
	if got := serial(c); got != oldSerial {
		t.Errorf("certificate %s served before its key was rotated, want the old one, %s", got, oldSerial)
	}
	c.Close()

	replace(t, key, rotated.ServerKey, t0.Add(2*time.Second))
	replace(t, ca, rotated.CA, t0.Add(2*time.Second))
	c, err = dial(t, addr, both, rotated.ClientCert, rotated.ClientKey)
	if err != nil {
		t.Fatalf("handshake after the rotation, with the new CA's client certificate: %v", err)
	}
	if got := serial(c); got == oldSerial {
		t.Errorf("certificate %s still served after the rotation", got)
	}
	c.Close()
	if c, err := dial(t, addr, both, old.ClientCert, old.ClientKey); err == nil {
		c.Close()
		t.Error("a client certificate of the replaced client CA was accepted after the rotation")
	}

	// The connection made before the rotation still works.
	if _, err := before.Write([]byte("still there\n")); err != nil {
		t.Fatalf("old connection after the rotation: %v", err)
	}
	if line, err := bufio.NewReader(before).ReadString('\n'); err != nil || line != "still there\n" {
		t.Fatalf("old connection after the rotation: %q, %v", line, err)
	}
}
