package control

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// ServerTLS builds the xDS server's TLS config from PEM files: the server
// certificate and key, and optionally a client CA bundle, which turns on
// mTLS (clients must present a certificate signed by it). TLS 1.2 is the
// minimum, which Envoy supports.
func ServerTLS(certFile, keyFile, clientCAFile string) (*tls.Config, error) {
	var errs []error
	if certFile == "" {
		errs = append(errs, errors.New("tls: server certificate file is required"))
	}
	if keyFile == "" {
		errs = append(errs, errors.New("tls: server key file is required"))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("tls: server certificate %s / key %s: %w", certFile, keyFile, err)
	}
	cfg := &tls.Config{
		Certificates: []tls.Certificate{cert},
		MinVersion:   tls.VersionTLS12,
		NextProtos:   []string{"h2"},
	}
	if clientCAFile != "" {
		pem, err := os.ReadFile(clientCAFile)
		if err != nil {
			return nil, fmt.Errorf("tls: client CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls: client CA %s: no PEM certificates in it", clientCAFile)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}
