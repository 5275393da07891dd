package tlsfiles_test

import (
	"crypto/tls"
	"strings"
	"testing"

	"github.com/llmesh/llmesh/internal/tlsfiles"
	"github.com/llmesh/llmesh/internal/tlsfiles/tlstest"
)

func TestFiles(t *testing.T) {
	pki := tlstest.New(t)
	s, err := tlsfiles.Server(pki.ServerCert, pki.ServerKey, pki.CA)
	if err != nil || s.ClientAuth != tls.RequireAndVerifyClientCert {
		t.Fatalf("server with a client CA: %v, client auth %v", err, s.ClientAuth)
	}
	c, err := tlsfiles.Client(pki.CA, pki.ClientCert, pki.ClientKey, "scheduler.internal")
	if err != nil || len(c.Certificates) != 1 || c.ServerName != "scheduler.internal" {
		t.Fatalf("client: %v %+v", err, c)
	}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{func() error { _, err := tlsfiles.Client(pki.CA, pki.ClientCert, "", ""); return err }(), "cert_file and key_file go together"},
		{func() error { _, err := tlsfiles.Client(pki.ClientKey, "", "", ""); return err }(), "no PEM certificates"},
		{func() error { _, err := tlsfiles.Server("", "", ""); return err }(), "server certificate file is required"},
		{func() error { _, err := tlsfiles.Server("", "", ""); return err }(), "server key file is required"},
		{func() error { _, err := tlsfiles.Server(pki.ServerCert, pki.ServerKey, pki.ServerKey); return err }(), "no PEM certificates"},
		{func() error { _, err := tlsfiles.Server(pki.ServerCert, pki.ServerKey, "/nonexistent"); return err }(), "client CA"},
	} {
		if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("err = %v, want %q", tc.err, tc.want)
		}
	}
}

func TestPlaintext(t *testing.T) {
	for _, tc := range []struct {
		addr     string
		insecure bool
		err      string // empty: no error
		warn     bool
	}{
		{"127.0.0.1:9090", false, "", false},
		{"127.3.4.5:0", false, "", false},
		{"[::1]:9090", false, "", false},
		{"localhost:9090", false, "", false},
		{"LOCALHOST:9090", false, "", false},
		{"0.0.0.0:9090", false, `--listen: "0.0.0.0:9090" is not a loopback address`, false},
		{":9090", false, "give --tls-cert and --tls-key, or --insecure", false},
		{"[::]:9090", false, "--insecure", false},
		{"10.0.0.5:7070", false, "not a loopback address", false},
		{"scheduler.internal:7070", false, "not a loopback address", false},
		{"garbage", false, "not a loopback address", false},
		{"0.0.0.0:9090", true, "", true},
		{"127.0.0.1:9090", true, "", false},
	} {
		warn, err := tlsfiles.Plaintext("--listen", tc.addr, "--tls-cert and --tls-key", tc.insecure)
		if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s insecure=%v: error %v, want %q", tc.addr, tc.insecure, err, tc.err)
		}
		if (warn != "") != tc.warn || tc.warn && !strings.Contains(warn, "PLAINTEXT beyond loopback") {
			t.Errorf("%s insecure=%v: warning %q, want one: %v", tc.addr, tc.insecure, warn, tc.warn)
		}
	}
}
