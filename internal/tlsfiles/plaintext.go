package tlsfiles

import (
	"fmt"
	"net"
	"strings"
)

// Loopback reports whether a listener on addr (host:port) can be reached
// only from its own host: a loopback IP or "localhost". An empty host,
// 0.0.0.0, :: and every other name or address listen beyond it.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Plaintext checks a listener that will serve without TLS. On loopback it
// returns nothing. Beyond it, without insecure, it returns an error that
// names the listen flag, the TLS flags that would fix it and --insecure;
// with insecure, a warning to log loudly at start.
func Plaintext(listenFlag, addr, tlsFlags string, insecure bool) (warning string, err error) {
	if Loopback(addr) {
		return "", nil
	}
	if !insecure {
		return "", fmt.Errorf("%s: %q is not a loopback address and would serve plaintext without authentication: "+
			"give %s, or --insecure to serve plaintext on it anyway", listenFlag, addr, tlsFlags)
	}
	return fmt.Sprintf("WARNING: %s %s serves PLAINTEXT beyond loopback (--insecure): anyone who reaches it can "+
		"read and send its traffic unauthenticated; give %s to serve TLS", listenFlag, addr, tlsFlags), nil
}
