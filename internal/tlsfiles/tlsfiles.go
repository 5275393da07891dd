// Package tlsfiles builds TLS configurations from PEM files, the same way
// for every llmesh listener and client: the xDS server (control), the
// shared scheduler service and its clients (gateways and Envoy filters).
// TLS 1.2 is the minimum, which Envoy supports.
package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// Server is a server's TLS config: its certificate and key, and optionally
// a client CA bundle, which turns on mTLS (clients must present a
// certificate signed by it). ALPN offers h2 for gRPC clients; a client
// that negotiates none (the scheduler's framed transport) is served too.
func Server(certFile, keyFile, clientCAFile string) (*tls.Config, error) {
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
		if cfg.ClientCAs, err = pool(clientCAFile, "client CA"); err != nil {
			return nil, err
		}
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// Client is a client's TLS config: the CA bundle that signs the server's
// certificate (empty: the system's roots), the client's own certificate
// and key for mTLS (both or neither), and the name to verify the server's
// certificate against (empty: the host of the address dialled).
func Client(caFile, certFile, keyFile, serverName string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	if caFile != "" {
		var err error
		if cfg.RootCAs, err = pool(caFile, "CA"); err != nil {
			return nil, err
		}
	}
	if (certFile == "") != (keyFile == "") {
		return nil, errors.New("tls: cert_file and key_file go together (a client certificate needs its key)")
	}
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("tls: client certificate %s / key %s: %w", certFile, keyFile, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

func pool(file, what string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("tls: %s: %w", what, err)
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("tls: %s %s: no PEM certificates in it", what, file)
	}
	return p, nil
}
