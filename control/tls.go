package control

import (
	"crypto/tls"

	"github.com/llmesh/llmesh/internal/tlsfiles"
)

// ServerTLS builds the xDS server's TLS config from PEM files: the server
// certificate and key, and optionally a client CA bundle, which turns on
// mTLS (clients must present a certificate signed by it); see
// tlsfiles.Server.
func ServerTLS(certFile, keyFile, clientCAFile string) (*tls.Config, error) {
	return tlsfiles.Server(certFile, keyFile, clientCAFile)
}
