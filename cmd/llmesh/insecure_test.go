package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/llmesh/llmesh/internal/tlsfiles/tlstest"
	"github.com/llmesh/llmesh/testkit/proctest"
)

// The scheduler service, xDS and the endpoint picker refuse plaintext on
// an address beyond loopback unless --insecure says so, and then warn; with
// TLS they listen there without a word.
func TestPlaintextBeyondLoopback(t *testing.T) {
	pki := tlstest.New(t)
	mesh := proctest.WriteTemp(t, "mesh.yaml", "pools:\n  - {name: gpu, protocol: openai, endpoints: [127.0.0.1:1], capacity: {max_inflight: 2}}\n"+
		"classes:\n  - {name: default, priority: 0}\n")
	for _, tc := range []struct {
		name   string
		args   []string // listening on 0.0.0.0:0 in plaintext
		flag   string
		tls    []string
		listen *regexp.Regexp
	}{
		{"scheduler", []string{"scheduler", "serve", "--config", mesh, "--listen", "0.0.0.0:0"}, "--listen",
			[]string{"--tls-cert", pki.ServerCert, "--tls-key", pki.ServerKey}, schedulerListeningRE},
		{"control", []string{"control", "--config", mesh, "--admin", "off", "--xds", "0.0.0.0:0"}, "--xds",
			[]string{"--xds-cert", pki.ServerCert, "--xds-key", pki.ServerKey}, regexp.MustCompile(`xds on (\S+)`)},
		{"epp", []string{"epp", "--config", mesh, "--listen", "0.0.0.0:0"}, "--listen",
			[]string{"--tls-cert", pki.ServerCert, "--tls-key", pki.ServerKey}, eppAddrRE},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantUsage(t, mainErr(tc.args...), tc.flag+`: "0.0.0.0:0" is not a loopback address`, "--insecure", tc.tls[0])
			s := serve(t, append(tc.args, "--insecure")...)
			proctest.WaitMatch(t, &s.stdout, tc.listen, s)
			if !strings.Contains(s.stderr.String(), "WARNING: "+tc.flag+" 0.0.0.0:0 serves PLAINTEXT beyond loopback") {
				t.Errorf("stderr %q, want the plaintext warning", s.stderr.String())
			}
			if err := s.Stop(); err != nil {
				t.Fatal(err)
			}
			s = serve(t, append(tc.args, tc.tls...)...)
			proctest.WaitMatch(t, &s.stdout, tc.listen, s)
			if strings.Contains(s.stderr.String(), "PLAINTEXT") {
				t.Errorf("stderr %q: a plaintext warning with TLS on", s.stderr.String())
			}
			if err := s.Stop(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
