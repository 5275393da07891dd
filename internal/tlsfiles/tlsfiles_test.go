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
