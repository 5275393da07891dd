package proctest

import (
	"net"
	"os"
	"path/filepath"
	"testing"
)

// FreeAddr returns a loopback address that was free a moment ago. Only for
// programs that cannot listen on port 0 and report the port they got
// (Prometheus, Envoy's bootstrap); llmesh's own processes bind 127.0.0.1:0
// and print what they got.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// Port is the port of a host:port address.
func Port(t testing.TB, addr string) string {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// WriteTemp writes content into a file called name in a new temporary
// directory of the test and returns its path.
func WriteTemp(t testing.TB, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// Replace swaps path's content by a rename, the way editors and config
// management do, so a watcher never reads a half-written file.
func Replace(t testing.TB, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}
