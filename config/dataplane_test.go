package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/llmesh/llmesh/config"
)

const extProcPools = `
pools:
  - name: sim
    protocol: openai
    endpoints: [127.0.0.1:8000]
`

func TestDataPlaneDefaults(t *testing.T) {
	cfg, err := config.Load([]byte(minimal))
	if err != nil {
		t.Fatal(err)
	}
	l := cfg.Listeners[0]
	if l.DataPlane != config.DataPlaneGolang || l.ExtProc != nil {
		t.Fatalf("data plane %q, ext_proc %+v; want golang, none", l.DataPlane, l.ExtProc)
	}
	cfg, err = config.Load([]byte(extProcPools + `
classes:
  - {name: batch, priority: 1, queue: {max_wait: 45s}}
  - {name: chat, priority: 0}
default_class: chat
listeners:
  - name: a
    address: 127.0.0.1:8080
    routes: [{pool: sim}]
    data_plane: ext_proc
    ext_proc: {address: 127.0.0.1:9002}
  - name: b
    address: 127.0.0.1:8081
    routes: [{pool: sim}]
    data_plane: ext_proc
    ext_proc:
      address: epp.mesh.svc:9002
      failure_mode_allow: true
      message_timeout: 2m
      tls: {ca_file: /etc/envoy/epp-ca.pem, server_name: epp}
`))
	if err != nil {
		t.Fatal(err)
	}
	a, b := cfg.Listeners[0].ExtProc, cfg.Listeners[1].ExtProc
	// The default outlasts the longest class wait.
	if a.Host != "127.0.0.1" || a.Port != 9002 || a.FailureModeAllow || a.MessageTimeout != 46*time.Second || a.TLS != nil {
		t.Errorf("listener a: %+v", a)
	}
	if b.Host != "epp.mesh.svc" || !b.FailureModeAllow || b.MessageTimeout != 2*time.Minute || b.TLS.CAFile != "/etc/envoy/epp-ca.pem" || b.TLS.ServerName != "epp" {
		t.Errorf("listener b: %+v", b)
	}
	cfg, err = config.Load([]byte(strings.Replace(minimal, "routes: [{pool: sim}]", "routes: [{pool: sim}]\n    data_plane: ext_proc\n    ext_proc: {address: 127.0.0.1:9}", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Listeners[0].ExtProc.MessageTimeout; got != config.DefaultExtProcMessageTimeout {
		t.Errorf("message_timeout %v, want the default %v", got, config.DefaultExtProcMessageTimeout)
	}
	if cfg.Pools[0].AcceptUpstreamPick {
		t.Error("accept_upstream_pick is on by default; a client would choose its replica")
	}
}

func TestDataPlaneErrors(t *testing.T) {
	for _, tc := range []struct {
		name, listener string
		classes        string
		want           []string
	}{
		{"unknown data plane", "data_plane: ext-proc", "",
			[]string{`listeners[0].data_plane: "ext-proc" is not a known data plane (known: golang, ext_proc) (did you mean "ext_proc"?)`}},
		{"ext_proc without the data plane", "ext_proc: {address: 127.0.0.1:9}", "",
			[]string{`listeners[0].ext_proc: is only used with data_plane: ext_proc`}},
		{"ext_proc missing", "data_plane: ext_proc", "",
			[]string{`listeners[0].ext_proc: is required with data_plane: ext_proc (the picker's address)`}},
		{"address missing", "data_plane: ext_proc\n    ext_proc: {failure_mode_allow: true}", "",
			[]string{`listeners[0].ext_proc.address: is required`}},
		{"address malformed", "data_plane: ext_proc\n    ext_proc: {address: nowhere}", "",
			[]string{`listeners[0].ext_proc.address: "nowhere" must be host:port`}},
		{"timeout not a duration", "data_plane: ext_proc\n    ext_proc: {address: 127.0.0.1:9, message_timeout: soon}", "",
			[]string{`listeners[0].ext_proc.message_timeout: "soon" is not a duration (use Go syntax such as "250ms" or "1m30s")`}},
		{"timeout over Envoy's limit", "data_plane: ext_proc\n    ext_proc: {address: 127.0.0.1:9, message_timeout: 2h}", "",
			[]string{`listeners[0].ext_proc.message_timeout: "2h" is over Envoy's limit of 1h0m0s`}},
		{"timeout shorter than a queue", "data_plane: ext_proc\n    ext_proc: {address: 127.0.0.1:9, message_timeout: 10s}",
			"classes: [{name: slow, queue: {max_wait: 10s}}]\n",
			[]string{`listeners[0].ext_proc.message_timeout: "10s" must be longer than class "slow" queue.max_wait 10s: Envoy would give up on a request the picker still queues`}},
		{"default over Envoy's limit", "data_plane: ext_proc\n    ext_proc: {address: 127.0.0.1:9}",
			"classes: [{name: slow, queue: {max_wait: 3h}}]\n",
			[]string{`listeners[0].ext_proc.message_timeout: the default (class "slow" queue.max_wait 3h0m0s plus 1s) is over Envoy's limit of 1h0m0s: shorten that max_wait`}},
		{"tls without a CA, half a key pair", "data_plane: ext_proc\n    ext_proc: {address: 127.0.0.1:9, tls: {cert_file: /c.pem}}", "",
			[]string{
				`listeners[0].ext_proc.tls.ca_file: is required: Envoy verifies the picker's certificate against it`,
				`listeners[0].ext_proc.tls.cert_file: cert_file and key_file go together`,
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := tc.classes + strings.Replace(minimal, "routes: [{pool: sim}]", "routes: [{pool: sim}]\n    "+tc.listener, 1)
			if diff := cmp.Diff(tc.want, errorLines(t, src)); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
		})
	}
}
