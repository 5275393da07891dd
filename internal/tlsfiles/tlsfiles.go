// Package tlsfiles builds TLS configurations from PEM files, the same way
// for every llmesh listener and client: the xDS server (control), the
// shared scheduler service and its clients (gateways and Envoy filters),
// and the endpoint picker. TLS 1.2 is the minimum, which Envoy supports.
//
// A server's files are reloaded when they change (see Server), so a
// certificate can be rotated without a restart.
package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// Server is a server's TLS config: its certificate and key, and optionally
// a client CA bundle, which turns on mTLS (clients must present a
// certificate signed by it). ALPN offers h2 for gRPC clients; a client
// that negotiates none (the scheduler's framed transport) is served too.
//
// The files are read again when they change: every handshake first looks
// at the files' modification times and sizes (a stat each, no read), and
// when one changed it loads the certificate, key and CA anew. New
// handshakes then use the new files; connections already open keep the
// certificate they were made with. A change that does not load (a key
// written after its certificate, a half-written file) keeps the files in
// use and is tried again at the next handshake, so a rotation may write
// the files in any order.
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
	r := &reloader{files: []string{certFile, keyFile}}
	if clientCAFile != "" {
		r.files = append(r.files, clientCAFile)
	}
	if err := r.load(r.stamps()); err != nil {
		return nil, err
	}
	outer := r.cfg.Clone()
	outer.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) { return r.current(), nil }
	return outer, nil
}

// reloader holds a server's config, built from files, and builds it again
// when a file's stamp changes.
type reloader struct {
	files []string // certificate, key, optionally the client CA

	mu   sync.Mutex
	seen []stamp     // the files' stamps when cfg was loaded
	cfg  *tls.Config // never nil after the first load
}

// stamp is what tells a file changed without reading it.
type stamp struct {
	mod  time.Time
	size int64
}

func (r *reloader) stamps() []stamp {
	s := make([]stamp, len(r.files))
	for i, f := range r.files {
		if fi, err := os.Stat(f); err == nil {
			s[i] = stamp{fi.ModTime(), fi.Size()}
		}
	}
	return s
}

// current is the config to serve a handshake with, reloaded first when a
// file changed.
func (r *reloader) current() *tls.Config {
	now := r.stamps()
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range now {
		if now[i] != r.seen[i] {
			_ = r.loadLocked(now) // on error the files in use stay; retried at the next handshake
			break
		}
	}
	return r.cfg
}

func (r *reloader) load(s []stamp) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.loadLocked(s)
}

func (r *reloader) loadLocked(s []stamp) error {
	cert, err := tls.LoadX509KeyPair(r.files[0], r.files[1])
	if err != nil {
		return fmt.Errorf("tls: server certificate %s / key %s: %w", r.files[0], r.files[1], err)
	}
	cfg := &tls.Config{
		Certificates: []tls.Certificate{cert},
		MinVersion:   tls.VersionTLS12,
		NextProtos:   []string{"h2"},
	}
	if len(r.files) > 2 {
		if cfg.ClientCAs, err = pool(r.files[2], "client CA"); err != nil {
			return err
		}
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	r.cfg, r.seen = cfg, s
	return nil
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
